"""AgentDojo's own benchmark against the course's server.

AgentDojo (ETH Zurich; ``pip install agentdojo``, here 0.1.35) has suites of user tasks
(banking, Slack, travel, workspace), injection tasks, attacks and defenses, and runs an agent
as a pipeline of elements: a system message, the user's query, the model, a tool-execution
loop. Its suites, attacks, defenses and pipelines are used here unchanged. What a local
OpenAI-compatible server needs is a few lines of glue, in this module:

- ``NativeLLM``: AgentDojo's OpenAI element (``tools`` in, ``tool_calls`` out, through the
  server's parser), with two fixes: 0.1.35 sends ``temperature or NOT_GIVEN``, which drops a
  temperature of 0 (the server's default, 0.8, applies), and it sends no ``max_tokens``.
- ``PromptingClient``: the same cap for AgentDojo's prompting-based element (``LocalLLM``,
  which asks for ``<function=name>{...}</function>`` in plain text and parses it itself), and
  its tool results sent as user messages, in one piece.
- ``CappedClient``: the same cap for the tool filter's own request (which tools does the task
  need?), which AgentDojo sends without one.
- ``NoRerun``: AgentDojo reruns a whole task, three times in all, when the last assistant
  message has no text, which is what a loop cut off mid-call leaves; a small model does that
  often, and each rerun costs a full run. The run ends as it is instead.
- ``Transcript``: keeps the last run's messages, to see whether the injection reached the
  model at all (a model that never calls the tool that returns the injected text cannot be
  attacked by it, and AgentDojo counts that run as "attack failed").
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from course_lib.security.agentdojo_results import Mode, PairResult

try:
    import openai
    from agentdojo.agent_pipeline import (
        AgentPipeline,
        BasePipelineElement,
        LocalLLM,
        OpenAILLM,
        PipelineConfig,
        ToolsExecutionLoop,
    )
    from agentdojo.agent_pipeline.llms.openai_llm import (
        OpenAILLMToolFilter,
        _function_to_openai,
        _message_to_openai,
        _openai_to_assistant_message,
    )
    from agentdojo.functions_runtime import EmptyEnv, Env, FunctionsRuntime
    from agentdojo.types import ChatMessage, get_text_content_as_str, text_content_block_from_string
except ImportError as missing:  # pragma: no cover - the message is the point
    raise ImportError(f"AgentDojo is not installed ({missing.name}): `python3 course.py python -m pip install "
                      "agentdojo==0.1.35` (`python3 course.py test` installs it)") from None

NO_ENV = EmptyEnv()  # AgentDojo's default environment argument; the pipeline always passes one
DEFENSES: tuple[str | None, ...] = (None, "repeat_user_prompt", "spotlighting_with_delimiting", "tool_filter")


def openai_client(host: str, timeout: float = 300.0) -> openai.OpenAI:
    """An OpenAI client for the server at ``host`` (``connect().host``); no key, no retries."""
    return openai.OpenAI(base_url=f"{host}/v1", api_key="unused", max_retries=0,
                         http_client=openai.DefaultHttpxClient(timeout=timeout))


class NativeLLM(OpenAILLM):
    """AgentDojo's OpenAI element, sending ``temperature`` (0 included) and ``max_tokens``."""

    def __init__(self, client: openai.OpenAI, model: str, max_tokens: int = 256, temperature: float = 0.0) -> None:
        super().__init__(client, model, temperature=temperature)
        self.max_tokens = max_tokens
        self.name = model  # the tool filter sends this name as ``model``

    def query(self, query: str, runtime: FunctionsRuntime, env: Env = NO_ENV, messages: Sequence[ChatMessage] = (),
              extra_args: dict | None = None) -> tuple[str, FunctionsRuntime, Env, Sequence[ChatMessage], dict]:
        tools = [_function_to_openai(tool) for tool in runtime.functions.values()]
        try:
            completion = self.client.chat.completions.create(
                model=self.model, messages=[_message_to_openai(m, self.model) for m in messages],
                tools=tools or openai.NOT_GIVEN, temperature=self.temperature, max_tokens=self.max_tokens)
        except openai.BadRequestError as error:
            if not context_is_full(error):
                raise
            return ended_by_full_context(query, runtime, env, messages, extra_args)
        reply = _openai_to_assistant_message(completion.choices[0].message)
        return query, runtime, env, [*messages, reply], extra_args or {}


class LocalLLMThatRaises(LocalLLM):
    """AgentDojo's prompting-based element, ending the run when the context is full.

    ``LocalLLM`` turns any error of the request into an empty answer (it prints
    ``[debug] error``); here an error is raised instead, unless it says the context is full."""

    client: PromptingClient

    def query(self, query: str, runtime: FunctionsRuntime, env: Env = NO_ENV, messages: Sequence[ChatMessage] = (),
              extra_args: dict | None = None) -> tuple[str, FunctionsRuntime, Env, Sequence[ChatMessage], dict]:
        self.client.error = None
        answered = super().query(query, runtime, env, messages, extra_args or {})
        if self.client.error is None:
            return answered
        if isinstance(self.client.error, openai.BadRequestError) and context_is_full(self.client.error):
            return ended_by_full_context(query, runtime, env, messages, extra_args)
        raise self.client.error


CONTEXT_FULL = ("num_ctx is",  # this server: "the prompt is N tokens but num_ctx is 4096"
                "maximum context length",  # vLLM and OpenAI
                "exceeds the available context size")  # llama.cpp's server


def context_is_full(error: openai.BadRequestError) -> bool:
    """Whether a 400 says the conversation is longer than the server's context."""
    said = f"{error.message} {error.body}".lower()
    return any(phrase in said for phrase in CONTEXT_FULL)


def ended_by_full_context(query: str, runtime: FunctionsRuntime, env: Env, messages: Sequence[ChatMessage],
                          extra_args: dict | None) -> tuple[str, FunctionsRuntime, Env, Sequence[ChatMessage], dict]:
    """The run ends as it stands, with an empty last answer and ``context_full`` in
    ``extra_args``, and AgentDojo scores it."""
    reply: ChatMessage = {"role": "assistant", "content": [text_content_block_from_string("")], "tool_calls": None}
    return query, runtime, env, [*messages, reply], {**(extra_args or {}), "context_full": True}


class CappedClient:
    """Stands in for ``openai.OpenAI`` where an AgentDojo element calls
    ``client.chat.completions.create``, and adds ``max_tokens``: a small model can otherwise
    ramble to the end of its context."""

    def __init__(self, client: openai.OpenAI, max_tokens: int) -> None:
        self.client, self.max_tokens = client, max_tokens
        self.chat = self.completions = self

    def create(self, **request: Any) -> Any:
        return self.client.chat.completions.create(**request, max_tokens=self.max_tokens)


class PromptingClient(CappedClient):
    """The client of ``LocalLLM``: capped, and each tool result sent as a user message.

    ``LocalLLM`` sends tool results as role ``tool`` with no ``tool_call_id``, which this server
    refuses with a 400, as OpenAI's API does; its own ``tool_delimiter="user"`` would fix that
    but, in 0.1.35, spells the result one character per paragraph (it iterates over the JSON
    string as if it were a list of content blocks).
    """

    def __init__(self, client: openai.OpenAI, max_tokens: int) -> None:
        super().__init__(client, max_tokens)
        self.error: openai.APIError | None = None  # the last request's error, which LocalLLM would swallow

    def create(self, **request: Any) -> Any:
        request["messages"] = [{**m, "role": "user"} if m["role"] == "tool" else m for m in request["messages"]]
        try:
            return super().create(**request)
        except openai.APIError as error:
            self.error = error
            raise


class DoNothing(BasePipelineElement):
    """An agent that answers with nothing and calls no tool: the floor a benchmark's checks
    give for free. A check that passes on the untouched environment and an empty answer
    scores this agent as having done the task."""

    name = "do-nothing"

    def query(self, query: str, runtime: FunctionsRuntime, env: Env = NO_ENV, messages: Sequence[ChatMessage] = (),
              extra_args: dict | None = None) -> tuple[str, FunctionsRuntime, Env, Sequence[ChatMessage], dict]:
        reply: ChatMessage = {"role": "assistant", "content": [text_content_block_from_string("")], "tool_calls": None}
        return query, runtime, env, [*messages, {"role": "user", "content": [text_content_block_from_string(query)]},
                                     reply], extra_args or {}


def do_nothing_pipeline() -> tuple[AgentPipeline, Transcript]:
    """AgentDojo's pipeline around :class:`DoNothing`, for the same scoring as a model's runs."""
    transcript = Transcript()
    built = AgentPipeline([DoNothing(), transcript])
    built.name = "local-do-nothing"  # the attack addresses it as "Local model", as it does the model
    return built, transcript


class NoRerun(BasePipelineElement):
    """Gives a last assistant message without text an empty text, so AgentDojo scores the run as
    it ended instead of running the whole task again."""

    def query(self, query: str, runtime: FunctionsRuntime, env: Env = NO_ENV, messages: Sequence[ChatMessage] = (),
              extra_args: dict | None = None) -> tuple[str, FunctionsRuntime, Env, Sequence[ChatMessage], dict]:
        last = messages[-1]
        if last["role"] == "assistant" and last["content"] is None:
            messages = [*messages[:-1], {**last, "content": [text_content_block_from_string("")]}]
        return query, runtime, env, messages, extra_args or {}


@dataclass
class Transcript(BasePipelineElement):
    """Keeps the messages of the last run that passed through it."""

    messages: list[ChatMessage] = field(default_factory=list)
    context_full: bool = False  # the run ended because the conversation outgrew the context

    def query(self, query: str, runtime: FunctionsRuntime, env: Env = NO_ENV, messages: Sequence[ChatMessage] = (),
              extra_args: dict | None = None) -> tuple[str, FunctionsRuntime, Env, Sequence[ChatMessage], dict]:
        self.messages, self.context_full = list(messages), bool((extra_args or {}).get("context_full"))
        return query, runtime, env, messages, extra_args or {}

    def saw(self, texts: Sequence[str]) -> bool:
        """Whether a tool result that the model read in the last run contained any of ``texts``
        (the injections), compared on letters and digits alone: a tool's output format may fold
        lines or quote (YAML writes ``user's`` as ``user''s``). When the context was full, the
        results after the model's last reply were never read."""
        read = self.messages
        if self.context_full:  # the last reply is the empty one that ended the run
            replies = [i for i, m in enumerate(read) if m["role"] == "assistant"]
            read = read[:replies[-2] + 1] if len(replies) > 1 else read[:replies[-1]]
        results = [_letters(get_text_content_as_str(m["content"])) for m in read
                   if m["role"] == "tool" and m["content"]]
        return any(_letters(text) in result for text in texts for result in results)


def _letters(text: str) -> str:
    return re.sub(r"\W+", "", text)


def llm_element(mode: Mode, client: openai.OpenAI, model: str, max_tokens: int = 256) -> OpenAILLM | LocalLLM:
    """The model as a pipeline element: native tool calls, or AgentDojo's prompting format."""
    if mode == "native":
        return NativeLLM(client, model, max_tokens)
    llm = LocalLLMThatRaises(PromptingClient(client, max_tokens), model, temperature=0.0)
    llm.name = model
    return llm


def pipeline(mode: Mode, client: openai.OpenAI, model: str, defense: str | None, max_iters: int = 15,
             max_tokens: int = 256) -> tuple[AgentPipeline, Transcript]:
    """AgentDojo's own pipeline for ``defense`` around the model, and its transcript.

    ``defense`` is one of ``DEFENSES``: None, ``"repeat_user_prompt"``,
    ``"spotlighting_with_delimiting"``, or ``"tool_filter"`` (native mode only: AgentDojo's tool
    filter is an OpenAI call). ``max_iters`` bounds the tool loop (AgentDojo's default: 15).
    """
    if defense == "tool_filter" and mode != "native":
        raise ValueError("AgentDojo's tool filter needs the native mode (it is an OpenAI element)")
    config = PipelineConfig(llm=llm_element(mode, client, model, max_tokens), model_id=None, defense=defense,
                            system_message_name=None, system_message=None)
    built = AgentPipeline.from_config(config)
    for element in built.elements:
        if isinstance(element, ToolsExecutionLoop):
            element.max_iters = max_iters
        if isinstance(element, OpenAILLMToolFilter):  # its question about the tools, capped too
            element.client = CappedClient(element.client, max_tokens)
    transcript = Transcript()
    built.elements = [*built.elements, NoRerun(), transcript]
    # The important_instructions attack addresses the model by a name it looks up from the
    # pipeline's name; a name with "local" in it is addressed as "Local model".
    built.name = f"local-{mode}-{defense or 'none'}"
    return built, transcript


def run_pair(suite: Any, agent: AgentPipeline, transcript: Transcript, user_task: str,
             injection_task: str | None = None, attack: Any = None) -> PairResult:
    """Run ``user_task`` with AgentDojo's ``suite.run_task_with_pipeline``, attacked by ``attack``
    (AgentDojo's, e.g. ``load_attack("important_instructions", suite, agent)``) with the goal of
    ``injection_task``, or benign when that is None."""
    task = suite.get_user_task_by_id(user_task)
    goal = suite.get_injection_task_by_id(injection_task) if injection_task else None
    injections = attack.attack(task, goal) if goal is not None else {}
    started = time.perf_counter()
    transcript.messages, transcript.context_full = [], False
    utility, security = suite.run_task_with_pipeline(agent, task, goal, injections)
    if not transcript.messages:
        raise RuntimeError(f"the run of {user_task} ended before the end of the pipeline: its transcript is empty")
    replies = [m for m in transcript.messages if m["role"] == "assistant"]
    model_replies = replies[:-1] if transcript.context_full else replies
    return PairResult(
        user_task=user_task, injection_task=injection_task, utility=bool(utility),
        attack_succeeded=bool(security) if goal is not None else None,
        injection_seen=transcript.saw(list(injections.values())) if goal is not None else None,
        model_calls=len(model_replies), seconds=round(time.perf_counter() - started, 1),
        calls=[f"{call.function}({', '.join(f'{k}={v!r}' for k, v in call.args.items())})"
               for m in model_replies for call in m["tool_calls"] or []],
        answer=get_text_content_as_str(replies[-1]["content"] or []) if replies else "",
        context_full=transcript.context_full)
