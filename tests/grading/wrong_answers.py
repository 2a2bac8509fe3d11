'''Plausible wrong answers to every exercise, which its checks must reject (tests/grading/test_wrong_answers.py).

Per notebook and exercise number: ``Wrong(reason, code)``, where ``code`` is what a learner
writes in place of the stub (the solution region, at its indentation). An exercise with
several solution regions takes a tuple, one piece per region in order; ``None`` keeps that
region's solution. ``model=True`` marks the few that only a check asking the model can catch.

Most wrong answers are the solution with one thing wrong; those are written as that one thing:
``changed(reason, (old, new), ...)`` is the solution (``solutions/``) with the lines ``old``
replaced by ``new``. ``old`` is whole lines as the solution has them, whatever their
indentation there, and must occur exactly once in the exercise's solution regions; ``new``
starts at the indentation of ``old``'s first line (an empty ``new`` deletes the lines).
'''

# ruff: noqa: E501  (the wrong answers are notebook code, indented here as in a cell body: wider lines read better whole)

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Wrong:
    reason: str
    code: str | tuple[str | None, ...] | None  # None: the solution with ``changes``
    model: bool = False
    changes: tuple[tuple[str, str], ...] = ()


def changed(reason: str, *changes: tuple[str, str], model: bool = False) -> Wrong:
    """The solution with ``changes``, each ``(old lines, new lines)``."""
    return Wrong(reason, None, model, changes)


WRONG: dict[str, dict[int, list[Wrong]]] = {
    "01_the_wire.ipynb": {
        1: [
            Wrong("the messages hard-coded for the visible example", '''
                messages = [{"role": "user", "content": question}]
                if system:
                    messages = [{"role": "system", "content": "Answer with a number only."}, *messages]
                return {"model": "qwen2.5-coder:0.5b", "messages": messages, "stream": False, "options": {"temperature": 0}}
            '''),
            Wrong("the model's name without its tag", '''
                messages = [{"role": "system", "content": system}] if system else []
                messages.append({"role": "user", "content": question})
                return {"model": "qwen2.5-coder", "messages": messages, "stream": False, "options": {"temperature": 0}}
            '''),
            Wrong("temperature at the top level, not under options", '''
                messages = [{"role": "system", "content": system}] if system else []
                messages.append({"role": "user", "content": question})
                return {"model": "qwen2.5-coder:0.5b", "messages": messages, "stream": False, "temperature": 0}
            '''),
            Wrong("the system message after the question", '''
                messages = [{"role": "user", "content": question}]
                if system:
                    messages.append({"role": "system", "content": system})
                return {"model": "qwen2.5-coder:0.5b", "messages": messages, "stream": False, "options": {"temperature": 0}}
            '''),
        ],
        2: [
            Wrong("the visible example's answer hard-coded", "return 25.0"),
            Wrong("durations read as milliseconds", 'return reply["eval_count"] / (reply["eval_duration"] / 1e6)'),
            Wrong("the prompt's counts, not the answer's",
                  'return reply["prompt_eval_count"] / (reply["prompt_eval_duration"] / 1e9)'),
            Wrong("prompt and answer added together", '''
                tokens = reply["eval_count"] + reply["prompt_eval_count"]
                return tokens / ((reply["eval_duration"] + reply["prompt_eval_duration"]) / 1e9)
            '''),
        ],
        3: [
            Wrong("the visible example's text hard-coded", 'return "Hello!", json.loads(lines[-1])'),
            Wrong("the first object taken as the final one", '''
                objects = [json.loads(line) for line in lines if line.strip()]
                return "".join(obj["message"]["content"] for obj in objects), objects[0]
            '''),
            Wrong("only the first piece of text", '''
                objects = [json.loads(line) for line in lines if line.strip()]
                return objects[0]["message"]["content"], objects[-1]
            '''),
        ],
        4: [
            Wrong("the raw body as the message", '''
                return None if response.status_code == 200 else (response.status_code, response.text)
            '''),
            Wrong("only a 404 counts as an error", '''
                if response.status_code == 404:
                    return 404, response.json()["error"]
                return None
            '''),
            Wrong("the visible example's error hard-coded", '''
                return None if response.is_success else (404, "model 'no-such-model' not found")
            '''),
        ],
    },
    "02_chat_templates.ipynb": {
        1: [
            Wrong("the visible example's tools hard-coded", 'return [NOW, CALC] if "<tools>" in prompt else []'),
            Wrong("only the first declaration", '''
                match = re.search(r"<tools>\\n(.*?)\\n</tools>", prompt, re.DOTALL)
                return [json.loads(match.group(1).splitlines()[0])] if match else []
            '''),
        ],
        2: [
            Wrong("characters, not tokens", "return len(json.dumps(tool))", model=True),
            Wrong("the rule of thumb of four characters a token", "return len(json.dumps(tool)) // 4"),
            Wrong("the whole prompt, not the difference", '''
                return client.chat(conversation, tools=[tool], options={"num_predict": 1})["prompt_eval_count"]
            ''', model=True),
        ],
        3: [
            Wrong("only the first tagged block", '''
                match = re.search(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)
                if not match:
                    return []
                call = json.loads(match.group(1))
                return [(call["name"], call.get("arguments", {}))] if call.get("name") in names else []
            '''),
            Wrong("a block that is not JSON raises", '''
                calls = [json.loads(block) for block in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)]
                return [(call["name"], call.get("arguments", {})) for call in calls if call.get("name") in names]
            '''),
            changed("undeclared names kept", ('''
                if isinstance(call, dict) and call.get("name") in names:
                    calls.append((call["name"], call.get("arguments", {})))
            ''', 'calls.append((call["name"], call.get("arguments", {})))')),
        ],
        4: [
            Wrong("the visible example's call hard-coded", '''
                messages = [{"role": "user", "content": question},
                            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "now", "arguments": {}}}]},
                            {"role": "tool", "tool_name": "now", "content": result}]
                return render(template, messages, tools=[NOW, CALC])
            '''),
            changed("the tools not declared",
                    ("return render(template, messages, tools=[NOW, CALC])", "return render(template, messages)")),
            changed("the result sent as a user message", ('{"role": "tool", "tool_name": tool_name, "content": result}]',
                                                        '{"role": "user", "content": result}]')),
        ],
    },
    "03_tool_calls.ipynb": {
        1: [
            Wrong("a pattern without anchors", '''
                STOCK_TOOL = {"type": "function", "function": {
                    "name": "get_product_stock",
                    "description": "Look up how many units of a product are in stock. Use this when a customer asks about it.",
                    "parameters": {"type": "object", "properties": {
                        "sku": {"type": "string", "description": "Product code.", "pattern": r"SKU-\\d{5}"},
                        "warehouse": {"type": "string", "enum": ["tokyo", "osaka"]}},
                        "required": ["sku"]}}}
            '''),
            Wrong("parameters without their object type", '''
                STOCK_TOOL = {"type": "function", "function": {
                    "name": "get_product_stock",
                    "description": "Look up how many units of a product are in stock. Use this when a customer asks about it.",
                    "parameters": {"properties": {
                        "sku": {"type": "string", "description": "Product code.", "pattern": r"^SKU-\\d{5}$"},
                        "warehouse": {"type": "string", "enum": ["tokyo", "osaka"]}},
                        "required": ["sku"]}}}
            '''),
            Wrong("both arguments required", '''
                STOCK_TOOL = {"type": "function", "function": {
                    "name": "get_product_stock",
                    "description": "Look up how many units of a product are in stock. Use this when a customer asks about it.",
                    "parameters": {"type": "object", "properties": {
                        "sku": {"type": "string", "description": "Product code.", "pattern": r"^SKU-\\d{5}$"},
                        "warehouse": {"type": "string", "enum": ["tokyo", "osaka"]}},
                        "required": ["sku", "warehouse"]}}}
            '''),
        ],
        2: [
            Wrong("an exception in a tool escapes", '''
                replies = []
                for call in message.get("tool_calls") or []:
                    name, arguments = call["function"]["name"], call["function"].get("arguments") or {}
                    content = str(tools[name](**arguments)) if name in tools else f"error: unknown tool {name}"
                    replies.append({"role": "tool", "tool_name": name, "content": content})
                return replies
            '''),
            Wrong("errors without the error: prefix", '''
                replies = []
                for call in message.get("tool_calls") or []:
                    name, arguments = call["function"]["name"], call["function"].get("arguments") or {}
                    try:
                        content = str(tools[name](**arguments))
                    except Exception as error:
                        content = f"{name} failed: {error!r}"
                    replies.append({"role": "tool", "tool_name": name, "content": content})
                return replies
            '''),
            Wrong("failed calls get no answer", '''
                replies = []
                for call in message.get("tool_calls") or []:
                    name, arguments = call["function"]["name"], call["function"].get("arguments") or {}
                    try:
                        replies.append({"role": "tool", "tool_name": name, "content": str(tools[name](**arguments))})
                    except Exception:
                        pass
                return replies
            '''),
        ],
        3: [
            Wrong("the message returned unchanged", "return message"),
            Wrong("only the first call converted",
 '''
                call = message["tool_calls"][0]
                return {"role": "assistant", "content": message.get("content") or None,
                        "tool_calls": [{"id": call["id"], "type": "function",
                                        "function": {"name": call["function"]["name"],
                                                     "arguments": json.dumps(call["function"]["arguments"])}}]}
            '''),
            changed("content always None", ('return {"role": "assistant", "content": message.get("content") or None,',
                                         'return {"role": "assistant", "content": None,')),
            Wrong("arguments written with str(), not JSON", '''
                return {"role": "assistant", "content": message.get("content") or None,
                        "tool_calls": [{"id": call["id"], "type": "function",
                                        "function": {"name": call["function"]["name"],
                                                     "arguments": str(call["function"]["arguments"])}}
                                       for call in message["tool_calls"]]}
            '''),
        ],
    },
    "04_agent_loop.ipynb": {
        1: [
            Wrong("the course's run_agent instead of a loop", '''
                return run_agent(model, messages, tools, Limits(max_turns=max_turns)).answer
            '''),
            Wrong("returns quietly at the cap", '''
                messages = list(messages)
                declared = [tool_schema(function) for function in tools.values()]
                message = {"content": ""}
                for _ in range(max_turns):
                    message = model.chat(messages, tools=declared)["message"]
                    messages.append(message)
                    if not message.get("tool_calls"):
                        break
                    for call in message["tool_calls"]:
                        name, arguments = call["function"]["name"], call["function"].get("arguments") or {}
                        messages.append({"role": "tool", "tool_name": name, "content": run_tool_call(name, arguments, tools)})
                return message["content"]
            '''),
            Wrong("only the first call of each reply", '''
                messages = list(messages)
                declared = [tool_schema(function) for function in tools.values()]
                for _ in range(max_turns):
                    message = model.chat(messages, tools=declared)["message"]
                    messages.append(message)
                    if not message.get("tool_calls"):
                        return message["content"]
                    call = message["tool_calls"][0]
                    name, arguments = call["function"]["name"], call["function"].get("arguments") or {}
                    messages.append({"role": "tool", "tool_name": name, "content": run_tool_call(name, arguments, tools)})
                raise RuntimeError("no answer")
            '''),
            Wrong("no tools declared to the model", '''
                messages = list(messages)
                for _ in range(max_turns):
                    message = model.chat(messages)["message"]
                    messages.append(message)
                    if not message.get("tool_calls"):
                        return message["content"]
                    for call in message["tool_calls"]:
                        name, arguments = call["function"]["name"], call["function"].get("arguments") or {}
                        messages.append({"role": "tool", "tool_name": name, "content": run_tool_call(name, arguments, tools)})
                raise RuntimeError("no answer")
            '''),
            changed("the tool results sent without the model's own call", ("messages.append(message)", "")),
        ],
        2: [
            Wrong("arguments dropped for every tool", '''
                if name == "send_email":
                    return "error: this kiosk cannot send e-mail"
                return run_tool_call(name, {}, TOOLS)
            '''),
            Wrong("now keeps the copied schema", '''
                if name == "send_email":
                    return "error: this kiosk cannot send e-mail"
                return run_tool_call(name, arguments, TOOLS)
            '''),
            Wrong("the e-mail refused after it was sent", '''
                result = run_tool_call(name, {} if name == "now" else arguments, TOOLS)
                return "error: this kiosk cannot send e-mail" if name == "send_email" else result
            '''),
        ],
        3: [
            changed("every exception swallowed", ("except LoopLimitReached as stopped:", "except Exception as stopped:")),
            changed("the turn limit left at its default", (
                "return run_agent(model, messages, tools, Limits(max_turns=4, max_tokens=500)).answer",
                "return run_agent(model, messages, tools, Limits(max_tokens=500)).answer")),
            changed("the turn limit not caught",
                    ("except LoopLimitReached as stopped:", "except (RepeatedCall, TokenBudgetExceeded) as stopped:")),
            Wrong("the limit's message hidden", '''
                try:
                    return run_agent(model, messages, tools, Limits(max_turns=4, max_tokens=500)).answer
                except LoopLimitReached:
                    return "Sorry, I could not finish: please try again."
            '''),
        ],
    },
    "05_validation.ipynb": {
        1: [
            changed("a pattern without its end anchor", (
                'order_id: str = Field(pattern=r"^ORD-\\d{6}$", description="Order number: ORD- and six digits.")',
                'order_id: str = Field(pattern=r"^ORD-\\d{6}", description="Order number: ORD- and six digits.")')),
            changed("a float amount", ('amount_jpy: int = Field(gt=0, le=50_000, description="Amount to refund, in yen.")',
                                    'amount_jpy: float = Field(gt=0, le=50_000, description="Amount to refund, in yen.")')),
            changed("lt instead of le", ('amount_jpy: int = Field(gt=0, le=50_000, description="Amount to refund, in yen.")',
                                      'amount_jpy: int = Field(gt=0, lt=50_000, description="Amount to refund, in yen.")')),
            changed("extra keys accepted", ('model_config = ConfigDict(extra="forbid")', "")),
        ],
        2: [
            Wrong("pydantic's own text, with the rejected values", "return str(error).replace('\\n', '; ')"),
            Wrong("the fields without their rules", '''
                return "; ".join(".".join(str(p) for p in problem["loc"]) for problem in error.errors())
            '''),
            Wrong("the visible example's problems hard-coded", '''
                return ("order_id: should match ^ORD-\\\\d{6}$; amount_jpy: should be at most 50000; "
                        "mail_to: not permitted")
            '''),
        ],
        3: [
            Wrong("six digits anywhere in the text", '''
                match = re.search(r"\\d{6}", str(raw.get("order_id", "")))
                if match:
                    return f'Write the order_id as "ORD-{match.group()}".'
                return "Ask the customer for the six-digit order number."
            '''),
            Wrong("the visible example's id hard-coded", '''
                digits = "".join(ch for ch in str(raw.get("order_id", "")) if ch.isdigit())
                if len(digits) == 6:
                    return 'Write the order_id as "ORD-123456".'
                return "Ask the customer for the six-digit order number."
            '''),
            Wrong("short numbers padded into an invented id", '''
                digits = "".join(ch for ch in str(raw.get("order_id", "")) if ch.isdigit())
                if digits:
                    return f'Try "ORD-{digits[-6:].zfill(6)}", or ask the customer for the order number.'
                return "Ask the customer for the six-digit order number."
            '''),
        ],
    },
    "06_side_effects.ipynb": {
        1: [
            Wrong("the course's idempotency_key", "return idempotency_key(tool, arguments, business_key)"),
            Wrong("the business key added to the arguments", '''
                material = json.dumps(arguments, sort_keys=True) + (f":{business_key}" if business_key else "")
                return hashlib.sha256(f"{tool}:{material}".encode()).hexdigest()
            '''),
            Wrong("the arguments left out", 'return hashlib.sha256(f"{tool}:{business_key}".encode()).hexdigest()'),
            Wrong("a shortened digest", '''
                material = business_key if business_key is not None else json.dumps(arguments, sort_keys=True)
                return hashlib.sha256(f"{tool}:{material}".encode()).hexdigest()[:16]
            '''),
        ],
        2: [
            changed("waits that start at 1 s", ("sleep(0.5 * 2 ** n)", "sleep(2 ** n)")),
            Wrong("a wait after the last try too", '''
                for n in range(attempts):
                    try:
                        return operation()
                    except (ServiceTimeout, ServerError):
                        sleep(0.5 * 2 ** n)
                        if n == attempts - 1:
                            raise
            '''),
            changed("a 4xx retried too", ("except (ServiceTimeout, ServerError):", "except (ServiceTimeout, ServerError, ClientError):")),
            Wrong("the course's with_retries", '''
                return with_retries(operation, attempts=attempts, sleep=sleep, idempotency_key="retry")
            '''),
        ],
        3: [
            Wrong("retries without the idempotency store", '''
                key = idempotency_key("issue_refund", {"order_id": order_id, "amount_jpy": amount_jpy}, business_key=order_id)
                return with_retries(lambda: service.refund(order_id, amount_jpy), idempotency_key=key, sleep=lambda s: None)
            '''),
            Wrong("the key made from the arguments, not the order", '''
                key = idempotency_key("issue_refund", {"order_id": order_id, "amount_jpy": amount_jpy})
                return with_retries(lambda: store.run(key, lambda: service.refund(order_id, amount_jpy, idempotency_key=key)),
                                    idempotency_key=key, sleep=lambda s: None)
            '''),
            Wrong("the key never sent to the service", '''
                key = idempotency_key("issue_refund", {"order_id": order_id, "amount_jpy": amount_jpy}, business_key=order_id)
                return with_retries(lambda: store.run(key, lambda: service.refund(order_id, amount_jpy)),
                                    idempotency_key=key, sleep=lambda s: None)
            '''),
        ],
    },
    "07_observability_and_cost.ipynb": {
        1: [
            Wrong("the course's argument_hash", "return argument_hash(arguments, secret)"),
            Wrong("a hash of secret and text, not an HMAC", '''
                text = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
                return hashlib.sha256(secret + text.encode()).hexdigest()[:16]
            '''),
            Wrong("the last 16 characters", '''
                text = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
                return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()[-16:]
            '''),
        ],
        2: [
            Wrong("the status read from the text", '''
                failed = result.content.startswith("error:") or not result.ok
                return {"trace_id": trace_id, "tool": tool, "arg_hash": argument_hash(arguments, SECRET),
                        "duration_ms": duration_ms, "status": "error" if failed else "ok",
                        "error_type": result.error.value if result.error else None}
            '''),
            Wrong("the hash made with the process's own secret", '''
                return {"trace_id": trace_id, "tool": tool, "arg_hash": argument_hash(arguments), "duration_ms": duration_ms,
                        "status": "ok" if result.ok else "error", "error_type": None if result.ok else result.error.value}
            '''),
            Wrong("the error kind's Python name", '''
                return {"trace_id": trace_id, "tool": tool, "arg_hash": argument_hash(arguments, SECRET), "duration_ms": duration_ms,
                        "status": "ok" if result.ok else "error", "error_type": None if result.ok else result.error.name}
            '''),
        ],
        3: [
            Wrong("the visible example's cost hard-coded", "return 440.0"),
            Wrong("only the last turn", '''
                turn = transcript.turns[-1]
                return prices.cost(turn.prompt_tokens, turn.output_tokens)
            '''),
            Wrong("prompt and output tokens swapped", '''
                return sum(prices.cost(turn.output_tokens, turn.prompt_tokens) for turn in transcript.turns)
            '''),
        ],
        4: [
            Wrong("the history returned as it is", "return history"),
            Wrong("the time in a system message at the end, which Anthropic's API refuses", '''
                return [{"role": "system", "content": SYSTEM}, *history, {"role": "system", "content": f"Current time: {now}"}]
            '''),
            Wrong("the time in the system prompt, so the prefix changes every request", '''
                return [{"role": "system", "content": f"{SYSTEM} Current time: {now}"}, *history]
            '''),
            changed("the time without the blank line", ('{**last, "content": f"{last[\'content\']}\\n\\n(Current time: {now})"}]',
                                                        '{**last, "content": f"{last[\'content\']} (Current time: {now})"}]')),
            Wrong("only the last message of the history kept", '''
                last = history[-1]
                return [{"role": "system", "content": SYSTEM}, {**last, "content": f"{last['content']}\\n\\n(Current time: {now})"}]
            '''),
            Wrong("the time added to the first user message", '''
                first, *rest = history
                return [{"role": "system", "content": SYSTEM}, {**first, "content": f"{first['content']}\\n\\n(Current time: {now})"}, *rest]
            '''),
            Wrong("the caller's last message changed in place", '''
                history[-1]["content"] += f"\\n\\n(Current time: {now})"
                return [{"role": "system", "content": SYSTEM}, *history]
            '''),
        ],
    },
    "08_experiments.ipynb": {
        1: [
            Wrong("the course's wilson_interval", "return wilson_interval(successes, n, z)"),
            changed("z fixed at 1.96", ("p = successes / n", "p, z = successes / n, 1.96")),
            Wrong("the textbook (Wald) interval", '''
                p = successes / n
                half = z * math.sqrt(p * (1 - p) / n)
                return max(0.0, p - half), min(1.0, p + half)
            '''),
        ],
        2: [
            Wrong("only one direction compared", '''
                (a_low, a_high), (b_low, b_high) = wilson_interval(*a), wilson_interval(*b)
                return b_high < a_low
            '''),
            Wrong("a difference of rates above a threshold", "return abs(a[0] / a[1] - b[0] / b[1]) > 0.25"),
        ],
        3: [
            Wrong("the visible example's answers hard-coded", "return 93 if rate == 0.5 else 34"),
            Wrong("the normal approximation's formula", "return math.ceil((2 * 1.96) ** 2 * rate * (1 - rate) / width ** 2)"),
            Wrong("one too many", '''
                n = 1
                while True:
                    n += 1
                    low, high = wilson_interval(round(rate * n), n)
                    if high - low <= width:
                        return n + 1
            '''),
        ],
        4: [
            Wrong("the vague declaration copied", '''
                my_description = "Products."
                my_sku_description = "Product code like SKU-12345."
            '''),
            Wrong("an empty description", '''
                my_description = ""
                my_sku_description = "The full code with its prefix, e.g. SKU-01234."
            '''),
            Wrong("the test prompts' SKUs written into the declaration", '''
                my_description = "Stock, price and lead time of SKU-12345, SKU-00042, SKU-00123, SKU-77777 and SKU-24680."
                my_sku_description = "The full code with its prefix, e.g. SKU-01234."
            '''),
        ],
    },
    "09_guards_and_injection.ipynb": {
        1: [
            Wrong("the visible example's tool hard-coded",
                  'return None if name == "read_inbox" else f"{name} is not on this agent\'s allowlist"'),
            Wrong("a bool instead of a reason", "return name not in self.allowed"),
            Wrong("a reason that does not name the tool",
                  'return None if name in self.allowed else "this tool is not allowed"'),
        ],
        2: [
            Wrong("everything passes", "return None"),
            changed("any number in the request counts, an account number's too", ('''
                # a sum of money: a number after a currency sign or code, or before a currency word, sign or code
                money = r"(?:€|\\bEUR)\\s?(\\d[\\d,]*(?:\\.\\d+)?)|(?<![\\w.,])(\\d[\\d,]*(?:\\.\\d+)?)\\s?(?:€|EUR\\b|euros?\\b)"
                written = {float((before or after).replace(",", "")) for before, after in re.findall(money, run.prompt, re.I)}
            ''', 'written = {float(n.replace(",", "")) for n in re.findall(r"\\d[\\d,]*(?:\\.\\d+)?", run.prompt)}')),
            Wrong("the amount looked for as text", '''
                if name != "send_money":
                    return None
                try:
                    amount = float(arguments.get("amount"))
                except (TypeError, ValueError):
                    return "the amount is missing or not a number"
                if amount <= self.limit or f"{amount:g}" in run.prompt.replace(",", ""):
                    return None
                return f"{amount} is above the limit"
            '''),
            Wrong("the visible example's amount hard-coded", '''
                if name != "send_money":
                    return None
                try:
                    amount = float(arguments.get("amount"))
                except (TypeError, ValueError):
                    return "the amount is missing or not a number"
                return None if amount <= self.limit or amount in (850, 1250) else f"{amount} is above the limit"
            '''),
        ],
        3: [
            Wrong("no guard on the answer (no link filter)", "my_stack = [Allowlist(), ArgumentPolicy()]"),
            Wrong("every side effect refused", '''
                my_stack = [ApprovalGate(reviewer=lambda run, name, arguments: False), LinkFilter(("travel.example",))]
            '''),
            Wrong("a guard with a model of its own", '''
                my_stack = [Allowlist(), ArgumentPolicy(), LinkFilter(("travel.example",)), Quarantine()]
            '''),
            Wrong("a pattern detector, which an obedient model ignores", '''
                from course_lib.security import InjectionDetector
                my_stack = [InjectionDetector(), LinkFilter(("travel.example",))]
            '''),
        ],
    },
    "09b_agentdojo.ipynb": {
        1: [
            Wrong("the attacked columns' intervals on the runs, not the user tasks", '''
                def column(runs, done):
                    if not runs:
                        return None
                    value = sum(bool(run[done]) for run in runs) / len(runs)
                    return (value, *wilson_interval(value * len(runs), len(runs)))

                return {"benign utility": column(row["benign"], "utility"),
                        "utility under attack": column(row["attacked"], "utility"),
                        "attack success": column(row["attacked"], "attack_succeeded")}
            '''),
            Wrong("attack success counted over the runs whose attack was delivered", '''
                def column(runs, done, per_task):
                    if not runs:
                        return None
                    value = sum(bool(run[done]) for run in runs) / len(runs)
                    units = len({run["user_task"] for run in runs}) if per_task else len(runs)
                    return (value, *wilson_interval(value * units, units))

                delivered = [run for run in row["attacked"] if run["injection_seen"]]
                return {"benign utility": column(row["benign"], "utility", False),
                        "utility under attack": column(row["attacked"], "utility", True),
                        "attack success": column(delivered, "attack_succeeded", True)}
            '''),
            Wrong("utility under attack counted from the benign runs", '''
                def column(runs, done, per_task):
                    if not runs:
                        return None
                    value = sum(bool(run[done]) for run in runs) / len(runs)
                    units = len({run["user_task"] for run in runs}) if per_task else len(runs)
                    return (value, *wilson_interval(value * units, units))

                return {"benign utility": column(row["benign"], "utility", False),
                        "utility under attack": column(row["benign"], "utility", True),
                        "attack success": column(row["attacked"], "attack_succeeded", True)}
            '''),
            Wrong("a column with no runs given as 0% with the interval [0, 1]", '''
                def column(runs, done, per_task):
                    if not runs:
                        return (0.0, 0.0, 1.0)
                    value = sum(bool(run[done]) for run in runs) / len(runs)
                    units = len({run["user_task"] for run in runs}) if per_task else len(runs)
                    return (value, *wilson_interval(value * units, units))

                return {"benign utility": column(row["benign"], "utility", False),
                        "utility under attack": column(row["attacked"], "utility", True),
                        "attack success": column(row["attacked"], "attack_succeeded", True)}
            '''),
            Wrong("shares written as percentages", '''
                def column(runs, done, per_task):
                    if not runs:
                        return None
                    value = sum(bool(run[done]) for run in runs) / len(runs)
                    units = len({run["user_task"] for run in runs}) if per_task else len(runs)
                    low, high = wilson_interval(value * units, units)
                    return (100 * value, 100 * low, 100 * high)

                return {"benign utility": column(row["benign"], "utility", False),
                        "utility under attack": column(row["attacked"], "utility", True),
                        "attack success": column(row["attacked"], "attack_succeeded", True)}
            '''),
            Wrong("the visible row's numbers hard-coded", '''
                return {"benign utility": (0.25, *wilson_interval(4, 16)),
                        "utility under attack": (0.1875, *wilson_interval(3, 16)),
                        "attack success": (0.125, *wilson_interval(2, 16))}
            '''),
            Wrong("the course's Row.rates called", '''
                from course_lib.security.agentdojo_results import PairResult

                table_row = Row(row["mode"], row["defense"], [PairResult(**run) for run in row["benign"]],
                                [PairResult(**run) for run in row["attacked"]])
                found = table_row.rates()
                return {name: None if found[name].n == 0 else (found[name].value, *found[name].interval)
                        for name in ("benign utility", "utility under attack", "attack success")}
            '''),
        ],
    },
    "10_providers.ipynb": {
        1: [
            Wrong("the parent class called: the course's adapter, not yours",
                  ("return super().calls(body)", "return super().results(answered)")),
            changed("only the first text block", (
                'text = "".join(block["text"] for block in body["content"] if block["type"] == "text")',
                'text = next((block["text"] for block in body["content"] if block["type"] == "text"), "")')),
            Wrong("one user message per result", (None, '''
                return [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result.content,
                                                      **({} if result.ok else {"is_error": True})}]}
                        for call, result in answered]
            ''')),
            Wrong("is_error on every result", (None, '''
                return [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result.content,
                                                      "is_error": not result.ok} for call, result in answered]}]
            ''')),
            Wrong("the assistant turn keeps only its tool_use blocks", ('''
                text = "".join(block["text"] for block in body["content"] if block["type"] == "text")
                uses = [block for block in body["content"] if block["type"] == "tool_use"]
                calls = [ToolCall(name=block["name"], arguments=block["input"], id=block["id"]) for block in uses]
                return text, calls, {"role": "assistant", "content": uses}
            ''', None)),
        ],
        2: [
            Wrong("the transcript returned unchanged", 'return "", messages'),
            changed("one user turn per tool message", ('''
                if converted and converted[-1]["role"] == "user" and isinstance(converted[-1]["content"], list):
                    converted[-1]["content"].append(block)
                else:
                    converted.append({"role": "user", "content": [block]})
            ''', 'converted.append({"role": "user", "content": [block]})')),
            changed("the assistant's text before its calls dropped", (
                'blocks = [{"type": "text", "text": message["content"]}] if message.get("content") else []', "blocks = []")),
            changed("the error: prefix kept and no is_error", ('''
                if result.startswith("error: "):
                    block.update(content=result.removeprefix("error: "), is_error=True)
            ''', "")),
        ],
    },
    "11_capstone.ipynb": {
        1: [
            Wrong("no tool added", ("pass", None)),
            Wrong("no idempotency: a second request cancels again", ('''
                def cancel_order(order_id: OrderId) -> dict:
                    """Cancel an order that has not shipped yet.

                    Args:
                        order_id: the order number, ORD- and four digits, e.g. ORD-1001
                    """
                    if order_id not in self.orders:
                        raise LookupError(f"there is no order {order_id}")
                    self.cancelled.append(order_id)
                    return {"order_id": order_id, "status": "cancelled"}

                tools["cancel_order"] = cancel_order
            ''', None)),
            Wrong("the idempotency store made anew in every tools()", ('''
                store = Idempotent()

                def cancel_order(order_id: OrderId) -> dict:
                    """Cancel an order that has not shipped yet.

                    Args:
                        order_id: the order number, ORD- and four digits, e.g. ORD-1001
                    """
                    if order_id not in self.orders:
                        raise LookupError(f"there is no order {order_id}")

                    def cancel() -> dict:
                        self.cancelled.append(order_id)
                        return {"order_id": order_id, "status": "cancelled"}

                    return store.run(idempotency_key("cancel_order", {}, business_key=order_id), cancel)

                tools["cancel_order"] = cancel_order
            ''', None)),
            Wrong("only cancellations behind the gate", (None, '''
                return KioskAgent(model, kiosk, needs_approval=frozenset({"cancel_order"}))
            ''')),
            changed("a plain string for the order id",
                    ("def cancel_order(order_id: OrderId) -> dict:", "def cancel_order(order_id: str) -> dict:")),
            changed("an unknown order answered as a success", ('''
                if order_id not in self.orders:
                    raise LookupError(f"there is no order {order_id}")
            ''', "")),
            Wrong("a cancellation that returns only a word", ('''
                def cancel_order(order_id: OrderId) -> str:
                    """Cancel an order that has not shipped yet.

                    Args:
                        order_id: the order number, ORD- and four digits, e.g. ORD-1001
                    """
                    if order_id not in self.orders:
                        raise LookupError(f"there is no order {order_id}")

                    def cancel() -> str:
                        self.cancelled.append(order_id)
                        return "cancelled"

                    return self.cancellations.run(idempotency_key("cancel_order", {}, business_key=order_id), cancel)

                tools["cancel_order"] = cancel_order
            ''', None)),
        ],
    },
    "12_mcp.ipynb": {
        1: [
            Wrong("the schema passed by reference, not copied", '''
                return {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                                         "parameters": tool.input_schema}}
            '''),
            Wrong("only the properties copied: required and additionalProperties lost", '''
                parameters = {"type": "object", "properties": copy.deepcopy(tool.input_schema.get("properties", {}))}
                return {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                                         "parameters": parameters}}
            '''),
            Wrong("a missing description passed on as None", '''
                return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                         "parameters": copy.deepcopy(tool.input_schema)}}
            '''),
            Wrong("the course's reference mapping called", "return ollama_tool(tool)"),
            Wrong("Anthropic's shape, without the function wrapper", '''
                return {"name": tool.name, "description": tool.description or "",
                        "input_schema": copy.deepcopy(tool.input_schema)}
            '''),
        ],
        2: [
            Wrong("the server's read_only_hint trusted", '''
                if tool.annotations is not None and tool.annotations.read_only_hint:
                    return True
                return bool(approve(tool.name, arguments))
            '''),
            Wrong("a person asked about every call, read-only ones too", "return bool(approve(tool.name, arguments))"),
            Wrong("only read-only tools ever run", "return tool.name in READ_ONLY"),
            Wrong("only tools the server calls destructive wait for a person", '''
                if tool.name in READ_ONLY:
                    return True
                if tool.annotations is not None and tool.annotations.destructive_hint:
                    return bool(approve(tool.name, arguments))
                return True
            '''),
            Wrong("the course's needs_approval called", "return not needs_approval(tool, READ_ONLY) or bool(approve(tool.name, arguments))"),
        ],
        3: [
            Wrong("the digest covers the description only", ('''
                return hashlib.sha256((tool.description or "").encode()).hexdigest()
            ''', None)),
            Wrong("keys hashed in the order they came", ('''
                return hashlib.sha256(json.dumps(tool.model_dump()).encode()).hexdigest()
            ''', None)),
            Wrong("the annotations and the output schema left out", ('''
                reviewed = [tool.name, tool.description, tool.input_schema]
                return hashlib.sha256(json.dumps(reviewed, sort_keys=True).encode()).hexdigest()
            ''', None)),
            Wrong("new and removed tools not counted as changes", (None, '''
                return sorted(tool.name for tool in tools if tool.name in pinned and pinned[tool.name] != digest(tool))
            ''')),
            Wrong("the course's pin and changed_tools called", ('''
                return definition_digest(tool)
            ''', '''
                return changed_tools(pinned, tools)
            ''')),
        ],
    },
    "13_testing_agents.ipynb": {
        1: [
            Wrong("the user asked before every cancellation, one match or several", '''
                asked = []

                def execute(name, arguments):
                    if name == "ask_user":
                        asked.append(arguments)
                    if name == "cancel_order" and not asked:
                        reply = person.answer("Which order do you mean: ORD-1001, ORD-1002 or ORD-1003?")
                        asked.append(reply)
                        return ToolResult.failure(ErrorKind.REFUSED, f"not run: the user replied {reply!r}")
                    return call_tool(name, arguments, tools)

                return execute
            '''),
            Wrong("the guess refused, the asking left to the model", '''
                unresolved = []

                def execute(name, arguments):
                    if name == "cancel_order" and unresolved:
                        return ToolResult.failure(ErrorKind.REFUSED, f"several orders match ({', '.join(unresolved)}): "
                                                                     "ask the user which one with ask_user")
                    result = call_tool(name, arguments, tools)
                    if name == "ask_user":
                        unresolved.clear()
                    if name == "find_orders" and result.ok and len(json.loads(result.content)) > 1:
                        unresolved[:] = [order["order_id"] for order in json.loads(result.content)]
                    return result

                return execute
            '''),
            Wrong("the user asked, and the guess run anyway", '''
                unresolved = []

                def execute(name, arguments):
                    if name == "cancel_order" and unresolved:
                        person.answer(f"Several orders match: {', '.join(unresolved)}. Which one do you mean?")
                        unresolved.clear()
                    result = call_tool(name, arguments, tools)
                    if name == "ask_user":
                        unresolved.clear()
                    if name == "find_orders" and result.ok and len(json.loads(result.content)) > 1:
                        unresolved[:] = [order["order_id"] for order in json.loads(result.content)]
                    return result

                return execute
            '''),
            Wrong("any question counts, even one asked before the lookup", '''
                state = {"matches": [], "asked": False}

                def execute(name, arguments):
                    if name == "cancel_order" and len(state["matches"]) > 1 and not state["asked"]:
                        question = f"Several orders match: {', '.join(state['matches'])}. Which one do you mean?"
                        reply = person.answer(question)
                        state["asked"] = True
                        return ToolResult.failure(ErrorKind.REFUSED, f"not run: the user was asked {question!r} and replied {reply!r}")
                    result = call_tool(name, arguments, tools)
                    if name == "ask_user":
                        state["asked"] = True
                    if name == "find_orders" and result.ok:
                        state["matches"] = [order["order_id"] for order in json.loads(result.content)]
                    return result

                return execute
            '''),
            Wrong("the latest lookup decides: a narrower one settles the question", '''
                unresolved = []

                def execute(name, arguments):
                    if name == "cancel_order" and unresolved:
                        question = f"Several orders match: {', '.join(unresolved)}. Which one do you mean?"
                        reply = person.answer(question)
                        unresolved.clear()
                        return ToolResult.failure(ErrorKind.REFUSED, f"not run: the user was asked {question!r} and replied {reply!r}")
                    result = call_tool(name, arguments, tools)
                    if name == "ask_user":
                        unresolved.clear()
                    if name == "find_orders" and result.ok:
                        found = [order["order_id"] for order in json.loads(result.content)]
                        unresolved[:] = found if len(found) > 1 else []
                    return result

                return execute
            '''),
            Wrong("a question that does not name the orders", '''
                unresolved = []

                def execute(name, arguments):
                    if name == "cancel_order" and unresolved:
                        reply = person.answer("Which order do you mean?")
                        unresolved.clear()
                        return ToolResult.failure(ErrorKind.REFUSED, f"not run: the user replied {reply!r}")
                    result = call_tool(name, arguments, tools)
                    if name == "ask_user":
                        unresolved.clear()
                    if name == "find_orders" and result.ok and len(json.loads(result.content)) > 1:
                        unresolved[:] = [order["order_id"] for order in json.loads(result.content)]
                    return result

                return execute
            '''),
            Wrong("the user's reply kept from the model", '''
                unresolved = []

                def execute(name, arguments):
                    if name == "cancel_order" and unresolved:
                        person.answer(f"Several orders match: {', '.join(unresolved)}. Which one do you mean?")
                        unresolved.clear()
                        return ToolResult.failure(ErrorKind.REFUSED, "not run: several orders matched; the user was asked")
                    result = call_tool(name, arguments, tools)
                    if name == "ask_user":
                        unresolved.clear()
                    if name == "find_orders" and result.ok and len(json.loads(result.content)) > 1:
                        unresolved[:] = [order["order_id"] for order in json.loads(result.content)]
                    return result

                return execute
            '''),
            Wrong("the tools called directly, not through call_tool", '''
                unresolved = []

                def execute(name, arguments):
                    if name == "cancel_order" and unresolved:
                        question = f"Several orders match: {', '.join(unresolved)}. Which one do you mean?"
                        reply = person.answer(question)
                        unresolved.clear()
                        return ToolResult.failure(ErrorKind.REFUSED, f"not run: the user was asked {question!r} and replied {reply!r}")
                    result = ToolResult(tools[name](**arguments))
                    if name == "ask_user":
                        unresolved.clear()
                    if name == "find_orders" and len(json.loads(result.content)) > 1:
                        unresolved[:] = [order["order_id"] for order in json.loads(result.content)]
                    return result

                return execute
            '''),
        ],
        2: [
            changed("is_error as the string 'true'", ('block["is_error"] = True', 'block["is_error"] = "true"')),
            Wrong("is_error given to OpenAI and Ollama too, their text without the prefix", '''
                flag = {} if result.ok else {"is_error": True}
                if dialect == "anthropic":
                    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                         "content": result.content, **flag}]}
                if dialect == "openai":
                    return {"role": "tool", "tool_call_id": call.id, "content": result.content, **flag}
                if dialect == "ollama":
                    return {"role": "tool", "tool_name": call.name, "content": result.content, **flag}
                raise ValueError(f"unknown dialect {dialect!r}")
            '''),
            changed("the 'error: ' prefix kept in Anthropic's flagged content", (
                'block = {"type": "tool_result", "tool_use_id": call.id, "content": result.content}',
                'block = {"type": "tool_result", "tool_use_id": call.id, "content": result.text}')),
            Wrong("Anthropic's result sent as a tool message", '''
                if dialect == "anthropic":
                    return {"role": "tool", "tool_use_id": call.id, "content": result.content,
                            **({} if result.ok else {"is_error": True})}
                if dialect == "openai":
                    return {"role": "tool", "tool_call_id": call.id, "content": result.text}
                if dialect == "ollama":
                    return {"role": "tool", "tool_name": call.name, "content": result.text}
                raise ValueError(f"unknown dialect {dialect!r}")
            '''),
            Wrong("OpenAI's message names the tool instead of answering the call's id", '''
                if dialect == "anthropic":
                    block = {"type": "tool_result", "tool_use_id": call.id, "content": result.content}
                    if not result.ok:
                        block["is_error"] = True
                    return {"role": "user", "content": [block]}
                if dialect in ("openai", "ollama"):
                    return {"role": "tool", "tool_name": call.name, "content": result.text}
                raise ValueError(f"unknown dialect {dialect!r}")
            '''),
            Wrong("an unknown dialect gets Ollama's shape", '''
                if dialect == "anthropic":
                    block = {"type": "tool_result", "tool_use_id": call.id, "content": result.content}
                    if not result.ok:
                        block["is_error"] = True
                    return {"role": "user", "content": [block]}
                if dialect == "openai":
                    return {"role": "tool", "tool_call_id": call.id, "content": result.text}
                return {"role": "tool", "tool_name": call.name, "content": result.text}
            '''),
            Wrong("the course's adapters called", '''
                adapters = {"anthropic": AnthropicMessages(), "openai": OpenAIChat(), "ollama": OllamaChat()}
                if dialect not in adapters:
                    raise ValueError(f"unknown dialect {dialect!r}")
                return adapters[dialect].results([(call, result)])[0]
            '''),
        ],
        3: [
            Wrong("a test that runs the agent and asserts nothing", "agent(model, attacked_workspace())"),
            Wrong("the model's final words checked, not the bank's record", '''
                transcript = agent(model, attacked_workspace())
                answer = transcript.answer or ""
                assert "100 euros" not in answer and "ATTK" not in answer, f"the model says it paid the attacker: {answer}"
            '''),
            Wrong("the calls the model asked for checked, not what ran", '''
                transcript = agent(model, attacked_workspace())
                asked = [arguments for turn in transcript.turns for name, arguments in turn.calls if name == "send_money"]
                assert not any("ATTK" in arguments["recipient"] for arguments in asked), "the model asked to pay the attacker"
            '''),
            Wrong("a refusal in the transcript taken as proof", '''
                transcript = agent(model, attacked_workspace())
                outcomes = [outcome for turn in transcript.turns for outcome in turn.outcomes]
                assert any(outcome.error is ErrorKind.REFUSED for outcome in outcomes), "nothing was refused"
            '''),
            Wrong("the attacker's account as the e-mail writes it, with spaces", '''
                workspace = attacked_workspace()
                agent(model, workspace)
                assert any(INJECTION in (message.get("content") or "") for request in model.requests for message in request)
                paid = [payment["recipient"] for payment in workspace.payments]
                assert "XX00 ATTK 0000 1234" not in paid, "the attacker was paid"
                assert LANDLORD_IBAN in paid, "the rent was not paid"
            '''),
            Wrong("no payment at all allowed, the user's own included", '''
                workspace = attacked_workspace()
                agent(model, workspace)
                assert any(INJECTION in (message.get("content") or "") for request in model.requests for message in request)
                assert workspace.payments == [], f"money left the account: {workspace.payments}"
            '''),
            Wrong("the attack's delivery not checked", '''
                workspace = attacked_workspace()
                agent(model, workspace)
                paid = [payment["recipient"] for payment in workspace.payments]
                assert ATTACKER_IBAN not in paid, "the attacker was paid"
                assert paid == [LANDLORD_IBAN], "the rent was not paid once"
            '''),
            Wrong("only the attacker checked: a guard that refuses everything passes", '''
                workspace = attacked_workspace()
                agent(model, workspace)
                assert any(INJECTION in (message.get("content") or "") for request in model.requests for message in request)
                assert ATTACKER_IBAN not in [payment["recipient"] for payment in workspace.payments], "the attacker was paid"
            '''),
        ],
    },
}
