"""An agent step: the tool-calling loop of one LLM agent, up to ``maxTurns`` calls.

Each turn: check the run's token budget, drain the inbox into the conversation,
call the model, run the tools it asked for (in order), and stop when it answers
without tools, when ``submit_result`` got valid arguments, or when turns run
out. ``content`` is the text of every turn joined; ``result`` is the first valid
``submit_result`` arguments. A step whose agent has a ``resultSchema`` and never
submits fails with zenflow's message; a judge fails open (its caller decides).

A reasoning model's reasoning is streamed apart from its answer and never
becomes the step's content. It stays in the visit's conversation, for the wires
that must see it again in a tool loop (Anthropic's and Bedrock's signed
thinking), and in the call journal with the reply, so a resumed visit sends
what the interrupted one sent; a loop's ``memory`` keeps none of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec
from msgspec import UNSET

from cadenza._redact import redact, scrub
from cadenza.actors.run import (
    Brief,
    BudgetExceeded,
    PermissionRule,
    RunContext,
    Scope,
    ToolRequest,
)
from cadenza.errors import CadenzaError, InboxFull
from cadenza.llm import (
    Completion,
    LLMClient,
    LLMRequest,
    LLMUsage,
    Message,
    ModelToolCall,
    ScriptedClient,
    ToolSpec,
)
from cadenza.protocols import (
    AgentMemory,
    AgentTurn,
    CallRecord,
    ErrorInfo,
    EventType,
    MessageDropped,
    MessageSent,
    Tokens,
    ToolCall,
    ToolPermission,
    format_duration,
)
from cadenza.workflow import DEFAULT_MAX_TURNS, Agent, LoadedWorkflow, MemoryWindow

from ._agent_tools import agent_builtins, builtin_names
from ._calls import CallLog, digest
from ._deltas import Streams
from ._mcp_tools import mcp_tools
from ._prompt import build_prompt, cap, read_context_files
from ._tools import Tool, ToolError, python_tool, schema_errors

__all__ = ["AgentOutcome", "AgentVisit", "BudgetExceeded", "model_spec", "run_agent"]


DEFAULT_SYSTEM = "You are a helpful assistant. Do the task you are given."
NEVER_SUBMITTED = "resultSchema defined but submit_result never called"
_OUTPUT_PREVIEW = 2000


@dataclass(frozen=True, slots=True)
class AgentOutcome:
    """What an agent produced: its text, its submitted result, or why it failed."""

    content: str
    result: Any
    error: ErrorInfo | None


def model_spec(
    run: RunContext, agent: Agent | None, agent_name: str | None, step_model: str | None
) -> str:
    if step_model:
        return step_model
    if agent is not None and agent.model:
        return agent.model
    if agent is not None and agent.script is not None:
        return f"scripted:{agent_name or 'agent'}"
    if run.default_model:
        return run.default_model
    who = f"agent {agent_name!r}" if agent_name else "a step without an agent"
    raise CadenzaError(f"no model for {who}: set its model, or give --model / CADENZA_MODEL")


class _Conversation:
    """One agent visit: the messages so far and the tools on offer."""

    def __init__(
        self,
        run: RunContext,
        address: str,
        agent_name: str | None,
        agent: Agent | None,
        directory: Path,
    ) -> None:
        self.run = run
        self.directory = directory  # where the built-ins' relative paths lead
        self.address = address
        self.agent_name = agent_name
        self.agent = agent
        self.tools: dict[str, Tool] = {}
        self.internal: set[str] = set()  # the run's own tools: no permission asked
        self.result: Any = None
        self.submitted = False
        self.rules = agent.permissions if agent is not None else None
        self.allow = tuple(PermissionRule.parse(r) for r in self.rules.allow) if self.rules else ()
        self.deny = tuple(PermissionRule.parse(r) for r in self.rules.deny) if self.rules else ()

    def offer(self, tool: Tool, *, internal: bool = False) -> None:
        self.tools[tool.spec.name] = tool
        if internal:
            self.internal.add(tool.spec.name)

    async def permitted(self, tool: Tool, call: ModelToolCall, arguments: dict[str, Any]) -> None:
        """Asks the run's policy about the call; a denial is the model's to hear.

        Raises:
            ToolError: The call may not run; the message says why.
        """
        policy = self.run.permissions
        if call.name in self.internal or not (policy.active or self.allow or self.deny):
            return
        name = tool.name or tool.spec.name
        request = ToolRequest(self.run.run_id, self.address, self.agent_name, name, arguments)
        decision = await policy.decide(request, self.allow, self.deny, self.directory)
        if decision is None:
            return
        allowed, by, reason = decision
        data = ToolPermission(
            tool_name=name, tool_call_id=call.id, allowed=allowed, by=by, reason=reason
        )
        self.run.journal.emit(
            EventType.TOOL_PERMISSION, step_id=self.address, agent=self.agent_name, data=data
        )
        if not decision.allowed:
            raise ToolError(f"permission denied: {decision.reason}")

    async def call(self, call: ModelToolCall, log: CallLog, turn: str) -> str:
        """Runs one tool call, or replays its recorded output; any failure becomes an
        error message for the model.

        The run's own tools (``submit_result``, ``send_message``...) act on the run, not
        on the world, and run again on resume, as the rest of the run's decisions do;
        the others are journaled in ``log``, keyed to the ``turn`` (model call) that
        asked for them.

        Returns:
            The answer for the model, known secrets scrubbed (``_redact.scrub``).
        """
        if call.name in self.internal:
            return await self._run(call)
        asked = digest(turn, call.id, call.name, call.arguments)
        recorded = log.replay("tool", asked)
        if recorded is not None:
            return recorded
        ran = call.name in self.tools
        if ran:  # the model's call that asked for it, and all before, outlive a kill
            await self.run.journal.settle()
        text = await self._run(call)
        await log.record("tool", asked, text, ran=ran)
        return text

    async def _run(self, call: ModelToolCall) -> str:
        journal = self.run.journal
        redacted = redact(call.arguments)[:_OUTPUT_PREVIEW]
        journal.emit(
            EventType.TOOL_CALL,
            step_id=self.address,
            agent=self.agent_name,
            data=ToolCall(phase="start", tool_name=call.name, tool_call_id=call.id, input=redacted),
        )
        error: str | None = None
        clock = self.run.clock
        started = clock.now()
        try:
            tool = self.tools.get(call.name)
            if tool is None:
                raise ToolError(
                    f"unknown tool {call.name!r}; available: {', '.join(sorted(self.tools))}"
                )
            try:
                arguments = msgspec.json.decode(call.arguments or "{}")
            except msgspec.DecodeError:
                raise ToolError("arguments are not valid JSON") from None
            if not isinstance(arguments, dict):
                raise ToolError("arguments must be a JSON object")
            await self.permitted(tool, call, arguments)
            output = await tool.run(arguments)
        except ToolError as failure:
            error = str(failure)
        except Exception as failure:  # a tool's own bug is the model's problem to hear about
            error = f"{type(failure).__name__}: {failure}"
        text = (
            output
            if error is None
            else msgspec.json.encode({"status": "error", "message": error}).decode()
        )
        # What a tool hands back goes to the model provider: no known secret, in any form,
        # leaves with it (a command that prints the environment, a file holding a key).
        text = cast(str, scrub(text))
        took = clock.now() - started
        journal.emit(
            EventType.TOOL_CALL,
            step_id=self.address,
            agent=self.agent_name,
            duration=took,
            error=error,
            data=ToolCall(
                phase="end",
                tool_name=call.name,
                tool_call_id=call.id,
                input=redacted,
                output=redact(text)[:_OUTPUT_PREVIEW],
                error=error,
                duration=format_duration(took),
            ),
        )
        return text


def _submit_result(conversation: _Conversation, schema: dict[str, Any]) -> Tool:
    async def submit(arguments: dict[str, Any]) -> str:
        problems = schema_errors(schema, arguments)
        if problems:
            raise ToolError("the result does not match resultSchema: " + "; ".join(problems))
        if not conversation.submitted:  # parallel calls in one turn: the first valid one wins
            conversation.result = arguments
            conversation.submitted = True
        return '{"status": "ok"}'

    spec = ToolSpec(
        name="submit_result",
        description="Submit your final structured result. Calling it ends your task.",
        parameters=schema,
    )
    return Tool(spec, submit)


_SEND_MESSAGE = ToolSpec(
    name="send_message",
    description="Send a message to the coordinator of this run.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The message."}},
        "required": ["text"],
    },
)


def _send_message(run: RunContext, address: str) -> Tool:
    async def send(arguments: dict[str, Any]) -> str:
        text = arguments.get("text")
        if not isinstance(text, str) or not text:
            raise ToolError("send_message needs a non-empty 'text' string")
        data = MessageSent(from_=address, to="coordinator", text=text, msg_type=0)
        run.journal.emit(EventType.MESSAGE_SENT, step_id=address, data=data)
        try:
            run.tell_coordinator(address, text)
        except InboxFull:
            reason = "the coordinator's inbox is full"
            dropped = MessageDropped(
                from_=address, to="coordinator", text=text, msg_type=0, reason=reason
            )
            run.journal.emit(EventType.MESSAGE_DROPPED, step_id=address, data=dropped)
            raise ToolError(f"message dropped: {reason}") from None
        return '{"status": "sent"}'

    return Tool(_SEND_MESSAGE, send)


def _tools(conversation: _Conversation, document: LoadedWorkflow, *, can_send: bool) -> None:
    agent = conversation.agent
    run = conversation.run
    builtins = agent_builtins(
        builtin_names(agent),
        base_dir=document.base_dir,
        run_id=run.run_id,
        address=conversation.address,
        clock=run.clock,
    )
    for tool in builtins:
        conversation.offer(tool)
    if agent is not None and agent.result_schema is not None:
        conversation.offer(_submit_result(conversation, agent.result_schema), internal=True)
    if agent is None or (agent.tools is None and agent.disallowed_tools is None):
        # Nothing allowed or denied by name (the common case): no sets to build.
        if can_send:
            conversation.offer(_send_message(run, conversation.address), internal=True)
        return
    _named_tools(conversation, agent, document.base_dir, can_send=can_send)


def _named_tools(
    conversation: _Conversation, agent: Agent, base_dir: Path, *, can_send: bool
) -> None:
    """What an agent's ``tools`` and ``disallowedTools`` let it have: ``send_message``
    unless left out, and the Python tools (``module:function``) it names."""
    allowed = None if agent.tools is None else set(agent.tools)
    denied = set(agent.disallowed_tools or ())
    if can_send and (allowed is None or "send_message" in allowed) and "send_message" not in denied:
        conversation.offer(_send_message(conversation.run, conversation.address), internal=True)
    for reference in sorted(allowed or ()):
        if ":" in reference and reference not in denied:
            conversation.offer(python_tool(reference, base_dir))


def _item(scope: Scope) -> Any:
    """The ``item`` variable visible at ``scope`` (the innermost wins), or None.

    What ``scope.activation(...)["item"]`` gives, without building the activation.
    """
    level: Scope | None = scope
    while level is not None:
        variables = level.variables
        if "item" in variables:
            return variables["item"]
        level = level.parent
    return None


def _remembered(run: RunContext, brief: Brief) -> list[Message]:
    """Earlier visits' turns this visit should see (loop ``memory``), oldest first."""
    if brief.memory == "fresh" or brief.memory_key is None:
        return []
    visits = run.conversations.get(brief.memory_key, [])
    if isinstance(brief.memory, MemoryWindow):
        visits = visits[-brief.memory.window :] if brief.memory.window > 0 else []
    return [message for visit in visits for message in visit]


def _remember(run: RunContext, brief: Brief, turns: list[Message], address: str) -> None:
    if brief.memory == "fresh" or brief.memory_key is None:
        return
    # A later visit starts with a question of its own: no wire needs this one's reasoning.
    turns = [msgspec.structs.replace(m, reasoning=UNSET) if m.reasoning else m for m in turns]
    # Recorded too: a resumed run replays this visit without calling the model again.
    data = AgentMemory(key=brief.memory_key, turns=list(turns))
    run.journal.emit(EventType.AGENT_MEMORY, step_id=address, data=data)
    visits = run.conversations.setdefault(brief.memory_key, [])
    visits.append(turns)
    if isinstance(brief.memory, MemoryWindow):
        del visits[: max(0, len(visits) - brief.memory.window)]  # keep only what is shown


@dataclass(frozen=True, slots=True)
class AgentVisit:
    """One visit of an agent: where it runs, what it is asked, and what it sees besides."""

    address: str
    agent_name: str | None
    instructions: str
    scope: Scope
    brief: Brief
    context: str | None = None
    """Extra text for the prompt (a judge's view of the iteration)."""
    step_model: str | None = None
    dependencies: Sequence[tuple[str, str]] = ()
    """(step id, content) of each ``dependsOn`` step, shown in the prompt."""
    context_files: Sequence[str] = ()
    drain_inbox: Callable[[], list[str]] = list
    """Takes the messages waiting for the step; called before each turn."""
    extra_tools: Sequence[Tool] = ()
    can_send_messages: bool = True
    max_retries: int | None = None
    execution: int = 1
    """Its number among the executions at ``address`` (a step's attempt): what its
    calls are recorded under."""
    resumes: int | None = None
    """The execution at ``address`` this one continues, on resume: its recorded calls
    are replayed (None: it continues none)."""
    recorded: Sequence[CallRecord] | None = None
    """The calls to replay, given (a work order's, on a worker) rather than read from
    the resumed run."""


async def run_agent(run: RunContext, document: LoadedWorkflow, visit: AgentVisit) -> AgentOutcome:
    """Runs an agent's tool-calling loop and returns its outcome.

    Expected failures (no submit, a model error, the budget) come back as
    ``AgentOutcome.error``; only cancellation propagates.
    """
    agent = document.workflow.agents.get(visit.agent_name) if visit.agent_name else None
    conversation = _Conversation(run, visit.address, visit.agent_name, agent, document.base_dir)
    contents: list[str] = []
    try:
        if visit.recorded is not None:
            log = CallLog(run, visit.address, visit.execution, visit.recorded)
        else:
            log = CallLog.resuming(run, visit.address, visit.execution, of=visit.resumes)
        talk = await _Talk.open(run, document, visit, conversation, contents, log)
        for turn in range(1, (agent.turns if agent is not None else DEFAULT_MAX_TURNS) + 1):
            if not await talk.turn(turn):
                break
        _remember(run, visit.brief, talk.own_messages(), visit.address)
    except CadenzaError as error:
        if isinstance(error, BudgetExceeded):
            run.exhaust_budget(ErrorInfo("BudgetExceeded", str(error), visit.address))
        info = ErrorInfo(
            type=type(error).__name__, message=redact(str(error)), address=visit.address
        )
        return AgentOutcome("\n\n".join(contents), None, info)
    content = "\n\n".join(contents)
    if agent is not None and agent.result_schema is not None and not conversation.submitted:
        return AgentOutcome(content, None, ErrorInfo("NoResult", NEVER_SUBMITTED, visit.address))
    return AgentOutcome(cap(content, 1024 * 1024), conversation.result, None)


@dataclass(slots=True)
class _Talk:
    """One visit's exchange with its model: what is sent each turn, and what came back."""

    run: RunContext
    visit: AgentVisit
    conversation: _Conversation
    client: LLMClient
    spec: str
    """The model as the agent names it (``provider:model``): what the events say."""
    provider: str
    """The provider ``spec`` resolved to (the request names its model): its price's key."""
    request: LLMRequest
    """The first turn's request; each turn sends it with the messages so far."""
    messages: list[Message]
    first_own: int
    """Where this visit's own messages start (before: a loop's remembered ones)."""
    contents: list[str]
    log: CallLog
    """The visit's calls: those it replays on resume, and the record of the rest."""

    @classmethod
    async def open(
        cls,
        run: RunContext,
        document: LoadedWorkflow,
        visit: AgentVisit,
        conversation: _Conversation,
        contents: list[str],
        log: CallLog,
    ) -> _Talk:
        """Resolves the model, offers the tools and writes the first prompt."""
        agent = conversation.agent
        spec = model_spec(run, agent, visit.agent_name, visit.step_model)
        providers = run.providers
        provider, model = providers.check(spec)
        script = agent.script if agent is not None and provider == "scripted" else None
        client = providers.client(provider, script=script, key=visit.agent_name or visit.address)
        _tools(conversation, document, can_send=visit.can_send_messages)
        for tool in await mcp_tools(run, agent, visit.address):
            conversation.offer(tool)
        for tool in visit.extra_tools:  # the coordinator's: they act inside the run
            conversation.offer(tool, internal=True)
        prompt = build_prompt(
            visit.instructions,
            brief=visit.brief,
            item=_item(visit.scope),
            dependencies=visit.dependencies,
            context=visit.context,
            context_files=read_context_files(document.base_dir, visit.context_files),
            inbox=visit.drain_inbox(),
        )
        system_prompt = agent.prompt if agent is not None and agent.prompt else DEFAULT_SYSTEM
        messages = [Message("system", system_prompt), *_remembered(run, visit.brief)]
        first_own = len(messages)
        messages.append(Message("user", scrub(prompt)))
        request = LLMRequest(
            model=model,
            messages=(),
            tools=tuple(tool.spec for tool in conversation.tools.values()),
            temperature=agent.temperature if agent is not None else None,
            top_p=agent.top_p if agent is not None else None,
            thinking=(agent and agent.thinking) or run.default_thinking or UNSET,
            # zenflow's maxRetries: the step's, else the workflow's, else the provider's.
            max_retries=(
                visit.max_retries
                if visit.max_retries is not None
                else document.workflow.options.max_retries
            ),
        )
        return cls(
            run,
            visit,
            conversation,
            client,
            spec,
            provider,
            request,
            messages,
            first_own,
            contents,
            log,
        )

    def own_messages(self) -> list[Message]:
        """This visit's messages: what a loop's ``memory`` keeps of it."""
        return self.messages[self.first_own :]

    async def turn(self, turn: int) -> bool:
        """Asks the model once and runs the tools it called; False: the visit is over
        (an answer without tools, or a result submitted)."""
        visit, messages = self.visit, self.messages
        if turn > 1:
            waiting = visit.drain_inbox()
            if waiting:
                inbox = "## Inbox\n" + "\n".join(f"- {m}" for m in waiting)
                messages.append(Message("user", scrub(inbox)))
        request = msgspec.structs.replace(self.request, messages=tuple(messages))
        asked = digest(_encode(request))
        completion = self._replayed(turn, asked) or await self._ask(turn, request, asked)
        if completion.content:
            self.contents.append(completion.content)
        messages.append(
            Message(
                "assistant",
                completion.content,
                tool_calls=completion.tool_calls,
                reasoning=completion.reasoning or UNSET,
            )
        )
        if not completion.tool_calls:
            return False
        for call in completion.tool_calls:
            output = await self.conversation.call(call, self.log, asked)
            messages.append(Message("tool", output, tool_call_id=call.id, name=call.name))
        return not self.conversation.submitted

    def _replayed(self, turn: int, asked: str) -> Completion | None:
        """The recorded reply to this request, when the visit replays its journal (an
        offline replay's calls are not: each is asked, and answered by the record).

        Its ``agent_turn`` events are stated again, as every decision of a resumed
        run is: the log has them, so they are not stored twice, and a control loop's
        budget, which counts from the restated ones, counts the call.
        """
        if self.log.offline:
            return None
        body = self.log.replay("model", asked)
        if body is None:
            return None
        completion = _decode_completion(body)
        usage = completion.usage
        self.run.journal.spent_before(
            self.visit.address, usage.prompt_tokens, usage.completion_tokens, self._cost(usage)
        )
        if completion.script_position is not None and isinstance(self.client, ScriptedClient):
            self.client.take(completion.script_position)  # live calls go on after it
        self._requested(turn, restated=True)
        self._answered(completion, restated=True)
        return completion

    async def _ask(self, turn: int, request: LLMRequest, asked: str) -> Completion:
        """Calls the model, records the call, and says so in the run's events. An offline
        replay's call is answered by the record instead, and otherwise goes the same way."""
        run, visit = self.run, self.visit
        self._requested(turn)
        offline = self.log.offline
        agent = self.conversation.agent
        priced = run.prices.price(self.provider, request.model) is not None
        async with run.model_call(
            visit.address,
            visit.agent_name,
            agent.max_cost if agent is not None else None,
            unpriced=None if priced else self.spec,
        ):
            if offline:  # ReplayDiffers when the record does not answer this request
                completion = _decode_completion(self.log.answer("model", asked))
            else:
                completion = await self._complete(request)
            usage = completion.usage
            run.journal.spend(
                visit.address,
                usage.prompt_tokens,
                usage.completion_tokens,
                cost=self._cost(usage),
                agent=visit.agent_name,
            )
        if not offline:
            # What is kept is what the run shows: no known secret, whatever the model said.
            await self.log.record("model", asked, cast(str, scrub(_encode(completion).decode())))
        self._answered(completion)
        return completion

    def _requested(self, turn: int, *, restated: bool = False) -> None:
        visit, journal = self.visit, self.run.journal
        thinking = self.request.thinking
        data = AgentTurn(
            phase="request",
            turn=turn,
            model=self.spec,
            thinking=thinking if isinstance(thinking, str) else None,
        )
        if restated:
            journal.restate(
                EventType.AGENT_TURN, step_id=visit.address, agent=visit.agent_name, data=data
            )
        else:
            journal.emit(
                EventType.AGENT_TURN, step_id=visit.address, agent=visit.agent_name, data=data
            )

    def _answered(self, completion: Completion, *, restated: bool = False) -> None:
        visit, journal, usage = self.visit, self.run.journal, completion.usage
        tokens = Tokens(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.prompt_tokens + usage.completion_tokens,
        )
        data = AgentTurn(
            phase="response",
            model=self.spec,
            attempts=completion.attempts,
            script_position=completion.script_position,
            cost=self._cost(usage),
            reasoning_tokens=usage.reasoning_tokens or None,
        )
        address, agent = visit.address, visit.agent_name
        if restated:
            journal.restate(
                EventType.AGENT_TURN, step_id=address, agent=agent, tokens=tokens, data=data
            )
        else:
            journal.emit(
                EventType.AGENT_TURN, step_id=address, agent=agent, tokens=tokens, data=data
            )

    def _cost(self, usage: LLMUsage) -> float | None:
        """USD of a call with ``usage`` (None: the model has no price)."""
        return self.run.prices.cost(self.provider, self.request.model, usage)

    async def _complete(self, request: LLMRequest) -> Completion:
        visit = self.visit
        streams = Streams(self.run, visit.address, visit.agent_name)
        try:
            return await self.client.complete(
                request, on_delta=streams.on_delta, on_reasoning=streams.on_reasoning
            )
        finally:  # the reply's text ends here, even when the call failed
            streams.finish()


_encode = msgspec.json.Encoder().encode
_decode_completion = msgspec.json.Decoder(Completion).decode
