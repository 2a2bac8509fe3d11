"""The course's server: an Ollama-compatible HTTP server over llama.cpp, and the registry of the
model weights it serves (``models``). One of the course's four rooms (docs/architecture.md;
course_server/README.md), with its one entry ``python -m course_server`` (``models ...`` for
the weights), which ``course_lib.runtime.connect()`` starts as a process.

It imports the learner's library (``course_lib``) for the modules it shares with the clients:
``config``, ``messages``, ``chat_template`` (messages and tools into a prompt), ``tool_parser``
(calls out of generated text) and ``dialects`` (OpenAI's and Anthropic's requests and responses,
to and from Ollama's); nothing of the grader's or the maintainers' rooms. Nothing imports it but
the maintainers' benchmarks (``course_tools/benchmarks/``) and the tests, so the learner's
library installs without llama.cpp. Inside, one module per step of a request:

- ``guard``: refuses hostile requests before any route runs (origin, host, API key, size, JSON
  shape); ``connections``: how many connections are held, and how long one may take
- ``wire``: the request bodies of Ollama's API, validated with their limits
- ``grammar_limits``: what a ``format`` schema may ask of its grammar, checked before compiling
- ``generation``: a generation without the model: defaults, errors, statistics, stop strings;
  ``ServedModel`` is what the routes need of a model, so tests can serve a scripted fake instead
- ``engine``: the model served: a ``model`` (weights, tokenizer, template, grammars) and a
  decoder (prompt tokens in, sampled tokens out, llama-cpp-python), ``one_at_a_time`` or
  several decoded together (``batching``, over a ``context``, with a ``prompt_cache``);
  ``batch_policy``: which ones, as pure code
- ``supervisor``: the model in a child process, restarted when it dies (as Ollama's runner)
- ``scheduler``: the one admission layer: as many generations as the model has slots, a bounded
  queue, 503 beyond it
- ``streams``: the OpenAI and Anthropic response bodies and event streams
- ``app``: the routes (FastAPI) that tie them together, and ``main`` for the command line
- ``models``: where the weights come from and how they are checked (``python -m course_server
  models fetch|list|check|bundle``)
"""
