"""The embedded server: an Ollama-compatible HTTP server over llama.cpp, in one layer.

Nothing outside this package imports it except to start it (``python -m course_server``,
which ``runtime.connect()`` does for you). Inside, one module per step of a request:

- ``guard``: refuses hostile requests before any route runs (origin, host, size, JSON shape)
- ``wire``: the request bodies of Ollama's API, validated with their limits
- ``dialects``: OpenAI's and Anthropic's requests and responses, translated to and from Ollama's
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

Below it sit the two modules it shares with the lessons: ``chat_template`` (messages and
tools into a prompt) and ``tool_parser`` (calls out of generated text).
"""
