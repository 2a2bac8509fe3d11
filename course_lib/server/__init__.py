"""The embedded server: an Ollama-compatible HTTP server over llama.cpp, in one layer.

Nothing outside this package imports it except to start it (``python -m course_lib.server``,
which ``runtime.connect()`` does for you). Inside, one module per step of a request:

- ``guard``: refuses hostile requests before any route runs (origin, host, size, JSON shape)
- ``wire``: the request bodies of Ollama's API, validated with their limits
- ``dialects``: OpenAI's and Anthropic's requests and responses, translated to and from Ollama's
- ``engine``: the model: prompt in, tokens out (llama-cpp-python); ``ServedModel`` is what
  the routes need of it, so tests can serve a scripted fake instead
- ``scheduler``: one generation at a time, a bounded queue, 503 beyond it
- ``streams``: the OpenAI and Anthropic response bodies and event streams
- ``app``: the routes (FastAPI) that tie them together, and ``main`` for the command line

Below it sit the two modules it shares with the lessons: ``chat_template`` (messages and
tools into a prompt) and ``tool_parser`` (calls out of generated text).
"""
