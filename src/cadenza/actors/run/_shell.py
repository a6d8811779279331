"""What a ``bash`` tool call will run, read before it runs: its simple commands.

A permission rule about ``bash`` is matched against each simple command of the
call's command line, never against the line as a string: ``pytest; touch x`` is
two commands, and both must be allowed. The line is parsed by tree-sitter's
bash grammar (MIT, maintained, and complete: ``case``, ``[[``, here-documents,
functions), then every command anywhere in it, in a pipeline, a list, a
subshell, a loop, a function's body or a substitution, is read into its words:

- quotes and backslashes removed (``r''m`` and ``\\rm`` are ``rm``), and the
  command named by its file name (``/bin/rm`` is ``rm``);
- wrappers looked through (``env A=1``, ``nice``, ``timeout 5``, ``xargs``,
  ``command``...): the command they run is the one matched; ``sudo`` and
  ``doas``, which change who runs it, are matched as written as well;
- a word the shell would expand (``$X``, ``*``, ``~``, ``{a,b}``) ends what is
  known: the command is matched as "these words, then anything".

What cannot be read with certainty is said, as a reason (`Reading.unclear`):
a command or process substitution, ``eval`` and the like, a shell or an
interpreter given code inline (``sh -c``, ``python -c``, ``awk``), ``find
-exec``/``-delete``, programs that run a command named in their arguments, a
variable as the command, an environment variable that makes a program load
other code (``LD_PRELOAD``, ``PATH``...), and anything the parser cannot read.
The permission policy treats those as "ask".

Commands run under ``/bin/sh -c``, which is not bash: where the two read a line
differently (``&>``, ``((``, a backslash-newline inside a word) the reading is
unclear rather than bash's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from cadenza.workflow import WRAPPERS

if TYPE_CHECKING:
    from tree_sitter import Language, Node, Parser

__all__ = ["Reading", "SimpleCommand", "read_command"]

MAX_COMMAND: Final = 128 * 1024
"""Characters of a command line read at most; a longer one is unclear."""

_MAX_INLINE_DEPTH: Final = 3  # sh -c 'sh -c "..."': inner scripts read this deep
_MAX_WRAPPERS: Final = 8

_Word = tuple[str, bool]
"""A word's text with quotes removed, and whether that is all of it (nothing expanded)."""


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command as a rule sees it.

    Attributes:
        text: Its words joined by single spaces, the command by its file name.
        open: None: ``text`` is the whole command. Otherwise ``text`` is how it
            starts and more follows that was not known when it was read:
            ``""`` anything (an expanded word), ``" "`` arguments (``xargs``).
        why: What that unknown part is, for ``open`` commands.
    """

    text: str
    open: str | None = None
    why: str = ""


@dataclass(frozen=True, slots=True)
class Reading:
    """A command line's simple commands, and why any part of it is unclear."""

    commands: tuple[SimpleCommand, ...]
    unclear: tuple[str, ...]


def read_command(line: str) -> Reading:
    """The simple commands of ``line``, and what could not be read (see the module's notes)."""
    reader = _Reader()
    reader.read(line, 0)
    return Reading(tuple(reader.commands), tuple(dict.fromkeys(reader.unclear)))


def _parser() -> Parser:
    """A parser of its own for each reading (0.3 us): a line may be read in a worker thread."""
    import tree_sitter

    return tree_sitter.Parser(_bash())


@functools.cache
def _bash() -> Language:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Language(tree_sitter_bash.language())


# Where bash and /bin/sh part ways, or text runs as code ----------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_SPLIT_WORD: Final = re.compile(r"[^\s;&|()<>\\]\\\n[^\s;&|()<>]")
"""A backslash-newline inside a word: sh joins the word, the grammar splits it."""

_CODE_VARIABLES: Final = re.compile(
    r"^(LD_\w*|DYLD_\w*|BASH_ENV|ENV|PATH|IFS|PS4|SHELLOPTS|BASHOPTS|PROMPT_COMMAND|"
    r"BASH_FUNC_\S*|GIT_\w*|PYTHON\w*|PERL\w*|RUBY\w*|NODE_\w*|JAVA_TOOL_OPTIONS|"
    r"_JAVA_OPTIONS|\w*PAGER|EDITOR|VISUAL|BROWSER|\w*_COMMAND|\w*OPTIONS|\w*OPTS)$"
)
"""Environment variables through which a command can be made to run other code."""

_RUNS_TEXT: Final = _words(
    "eval trap alias fc coproc bind complete compgen enable mapfile readarray"
)
"""Builtins that run, or later run, text as commands."""

_RUNNERS: Final = _words(
    "bwrap catchsegv cgexec chroot chrt dbus-run-session expect fakeroot faketime "
    "firejail flock gdb ltrace nsenter nsjail numactl parallel pkexec prlimit proot "
    "proxychains proxychains4 run-parts runuser schroot screen script setpriv sg ssh "
    "sshpass strace su systemd-run taskset tmux torsocks valgrind watch xvfb-run"
)
"""Programs that run a command given in their arguments, in a syntax not read here."""

_SHELLS: Final = _words(
    "sh bash dash zsh ksh mksh lksh oksh pdksh yash ash posh rbash fish csh tcsh"
)
_SHELL_VALUED: Final = frozenset(("-o", "+o", "-O", "+O", "--rcfile", "--init-file"))

_FIND_ACTIONS: Final = frozenset(
    ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls")
)


@dataclass(frozen=True, slots=True)
class _Interpreter:
    """A program that runs code given inline (``-c``), or read from stdin without a file."""

    letters: str  # short options whose argument is code (``c`` for ``python -c``)
    long: frozenset[str] = frozenset()  # long options whose argument is code
    valued: str = ""  # short options taking an argument that is not code (python -W)
    stop: str = ""  # short options after which the rest is the program's (python -m)
    program_first: bool = False  # the first operand is the program (awk) unless -f gives one


_PYTHON: Final = _Interpreter("c", valued="WXQ", stop="m")
_NODE: Final = _Interpreter("ep", frozenset(("--eval", "--print")), valued="r")
_AWK: Final = _Interpreter("e", valued="Fvf", program_first=True)
_INTERPRETERS: Final = {
    "python": _PYTHON,
    "pypy": _PYTHON,
    "perl": _Interpreter("eE", valued="IMmx"),
    "ruby": _Interpreter("e", valued="IrCE"),
    "node": _NODE,
    "nodejs": _NODE,
    "bun": _NODE,
    "deno": _Interpreter("", frozenset(("eval", "repl"))),
    "php": _Interpreter("rBRE", valued="cdz"),
    "lua": _Interpreter("e", valued="l"),
    "luajit": _Interpreter("e", valued="lj"),
    "Rscript": _Interpreter("e"),
    "R": _Interpreter("e"),
    "osascript": _Interpreter("e"),
    "pwsh": _Interpreter("c", frozenset(("-Command", "-EncodedCommand", "-command"))),
    "powershell": _Interpreter("c", frozenset(("-Command", "-EncodedCommand", "-command"))),
    "tclsh": _Interpreter(""),
    "wish": _Interpreter(""),
    "irb": _Interpreter("e"),
    "jshell": _Interpreter(""),
    "awk": _AWK,
    "gawk": _AWK,
    "mawk": _AWK,
    "nawk": _AWK,
}
_VERSIONED: Final = re.compile(r"^(python|pypy|perl|ruby|lua|php)[0-9.]*$")


# Wrappers ------------------------------------------------------------------------


class _Unclear(Exception):
    """Part of a command cannot be read with certainty; the message says why."""


@dataclass(frozen=True, slots=True)
class _Wrapper:
    """A command that runs the command after its options (``sudo -u x rm``)."""

    flags: frozenset[str] = frozenset()  # options without an argument
    valued: frozenset[str] = frozenset()  # options taking one (``-u USER``, ``--user=USER``)
    code: frozenset[str] = frozenset()  # options under which it runs a shell or a string
    positionals: int = 0  # words before the command (timeout's duration)
    assignments: bool = False  # NAME=VALUE words before the command (env, sudo)
    numeric: bool = False  # -N is an option (nice -10)
    more: bool = False  # it adds arguments read from its input (xargs)
    replace: frozenset[str] = frozenset()  # options that put input into any argument

    def command_at(self, words: Sequence[_Word], name: str) -> tuple[int | None, bool]:
        """Where the wrapped command starts (None: there is none), and if input fills it.

        Raises:
            _Unclear: An option is unknown, expanded, or makes the command a string.
        """
        index, replaced = 1, False
        while index < len(words):
            text, known = words[index]
            if not known:
                raise _Unclear(f"{name}'s options hold an expansion")
            if text == "--":
                index += 1
                break
            if self.assignments and _ASSIGNMENT.match(text):
                _check_variable(text.partition("=")[0])
                index += 1
                continue
            if not text.startswith("-") or (text == "-" and "-" not in self.flags):
                break
            step, fills = self._option(text, name)
            replaced = replaced or fills
            index += step
        index += self.positionals
        return (index if index < len(words) else None), replaced

    def _option(self, text: str, name: str) -> tuple[int, bool]:
        """How many words the option ``text`` takes, and if it puts input into arguments."""
        if text in self.flags:
            return 1, False
        if text.startswith("--"):
            return self._long_option(text, name)
        if self.numeric and text[1:].isdigit():
            return 1, False
        return self._short_options(text, name)

    def _long_option(self, text: str, name: str) -> tuple[int, bool]:
        """`_option` for ``--name`` or ``--name=value``."""
        option, equals, _ = text.partition("=")
        return self._one(option, bool(equals), name) or (1, False)

    def _short_options(self, text: str, name: str) -> tuple[int, bool]:
        """`_option` for a cluster of letters (``-nu USER``): read up to one taking a value."""
        for position in range(1, len(text)):
            taken = self._one("-" + text[position], position + 1 < len(text), name)
            if taken is not None:
                return taken
        return 1, False

    def _one(self, option: str, attached: bool, name: str) -> tuple[int, bool] | None:
        """What one option takes: `_option`'s answer, or None for a flag (nothing more).

        ``attached``: its value, if it takes one, is in the same word (``-uUSER``).
        """
        if option in self.code:
            raise _Unclear(f"{name} {option} runs a shell or a string")
        if option in self.replace:
            return 1, True
        if option in self.valued:
            return (1 if attached else 2), False
        if option in self.flags:
            return None
        raise _Unclear(f"{name} {option}: an option not read here")


_WRAPPER_SPECS: Final = {
    "builtin": _Wrapper(),
    "busybox": _Wrapper(),
    "command": _Wrapper(flags=_words("-p -v -V")),
    "doas": _Wrapper(flags=_words("-n"), valued=_words("-u -a"), code=_words("-s -C")),
    "env": _Wrapper(
        flags=_words("- -i -0 -v --ignore-environment --null --debug"),
        valued=_words("-u -C --unset --chdir"),
        code=_words("-S --split-string"),
        assignments=True,
    ),
    "exec": _Wrapper(flags=_words("-c -l"), valued=_words("-a")),
    "ionice": _Wrapper(flags=_words("-t --ignore"), valued=_words("-c -n --class --classdata")),
    "nice": _Wrapper(valued=_words("-n --adjustment"), numeric=True),
    "nohup": _Wrapper(),
    "setsid": _Wrapper(flags=_words("-c -f -w --ctty --fork --wait")),
    "stdbuf": _Wrapper(valued=_words("-i -o -e --input --output --error")),
    "sudo": _Wrapper(
        flags=_words(
            "-A -b -E -H -k -K -n -N -P -S --askpass --background --preserve-env "
            "--set-home --non-interactive --preserve-groups --stdin --reset-timestamp"
        ),
        valued=_words(
            "-C -D -g -h -p -R -r -T -t -U -u --close-from --chdir --group --host --prompt "
            "--chroot --role --command-timeout --type --other-user --user"
        ),
        code=_words("-e -i -l -s -v -V --edit --login --list --shell --validate --version"),
        assignments=True,
    ),
    "time": _Wrapper(
        flags=_words("-p -a -v -q --append --verbose --portability --quiet"),
        valued=_words("-f -o --format --output"),
    ),
    "timeout": _Wrapper(
        flags=_words("-v --preserve-status --foreground --verbose"),
        valued=_words("-s -k --signal --kill-after"),
        positionals=1,
    ),
    "unbuffer": _Wrapper(flags=_words("-p")),
    "xargs": _Wrapper(
        flags=_words(
            "-0 -r -t -p -x -o --null --no-run-if-empty --verbose --interactive --exit --open-tty"
        ),
        valued=_words(
            "-n -L -P -s -d -E -a --max-args --max-lines --max-procs --max-chars --delimiter "
            "--eof --arg-file --process-slot-var"
        ),
        replace=_words("-I -i --replace"),
        more=True,
    ),
}
_PRIVILEGED: Final = frozenset(("sudo", "doas"))
"""Wrappers matched both as written and by the command they run (they change who runs it)."""
# A rule may not name a wrapper it could never match (workflow._rules refuses it).
assert frozenset(_WRAPPER_SPECS) == WRAPPERS | _PRIVILEGED

_ASSIGNMENT: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _check_variable(name: str) -> None:
    if _CODE_VARIABLES.match(name):
        raise _Unclear(f"it sets {name}, through which a program can be made to run other code")


# Reading -------------------------------------------------------------------------


@dataclass(slots=True)
class _Reader:
    commands: list[SimpleCommand] = field(default_factory=list)
    unclear: list[str] = field(default_factory=list)

    def read(self, line: str, depth: int) -> None:
        if len(line) > MAX_COMMAND:
            self.unclear.append(f"it is longer than the {MAX_COMMAND} characters read")
            return
        if "\0" in line:
            self.unclear.append("it holds a NUL byte")
            return
        try:
            source = line.encode()
        except UnicodeEncodeError:
            self.unclear.append("it is not valid text")
            return
        if _SPLIT_WORD.search(line):
            self.unclear.append("a backslash-newline inside a word, which sh joins")
        tree = _parser().parse(source)
        if tree.root_node.has_error:
            self.unclear.append("it does not parse as a shell command")
            return
        done: set[int] = set()
        for node in _walk(tree.root_node):
            self._node(node, source, depth, done)

    def _node(self, node: Node, source: bytes, depth: int, done: set[int]) -> None:
        kind = node.type
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            if body is not None and body.type == "command":
                done.add(body.id)
                self._command(body, _redirect_words(node), source, depth)
        elif kind == "command" and node.id not in done:
            self._command(node, [], source, depth)
        elif kind in ("declaration_command", "unset_command"):
            keyword = node.children[0].type if node.children else kind
            words = [(keyword, True)] + [_literal(child, source) for child in node.named_children]
            self._simple(words, depth)
        elif kind == "variable_assignment":
            name = node.child_by_field_name("name")
            try:
                _check_variable(_text(name, source) if name is not None else "")
            except _Unclear as unclear:
                self.unclear.append(str(unclear))
        else:
            reason = _unclear_construct(node)
            if reason is not None:
                self.unclear.append(reason)

    def _command(self, node: Node, extra: list[Node], source: bytes, depth: int) -> None:
        name = node.child_by_field_name("name")
        if name is None:  # assignments and redirections only
            return
        arguments = sorted(
            [*node.children_by_field_name("argument"), *extra], key=lambda n: n.start_byte
        )
        words = [_literal(name, source)] + [_literal(a, source) for a in arguments]
        self._simple(words, depth)

    def _simple(self, words: Sequence[_Word], depth: int) -> None:
        more = replaced = False
        for _ in range(_MAX_WRAPPERS):
            text, known = words[0]
            if not known:
                self.unclear.append("the command's name is an expansion ($X, a glob...)")
                return
            wrapper = _WRAPPER_SPECS.get(_file_name(text))
            if wrapper is None:
                break
            try:
                start, fills = wrapper.command_at(words, _file_name(text))
            except _Unclear as unclear:
                self.unclear.append(str(unclear))
                return
            if start is None:
                break
            if _file_name(text) in _PRIVILEGED:
                self.commands.append(
                    _command(_file_name(text), words[1:], more=more, replaced=False)
                )
            more, replaced = more or wrapper.more, replaced or fills
            words = words[start:]
        else:
            self.unclear.append("wrappers nested too deep to read")
            return
        name = _file_name(words[0][0])
        arguments = words[1:]
        reason, script = _runs_code(name, arguments)
        if reason is not None:
            self.unclear.append(reason)
        if script is not None and depth < _MAX_INLINE_DEPTH:
            self.read(script, depth + 1)  # what it runs is checked as well, when known
        self.commands.append(_command(name, arguments, more=more, replaced=replaced))


def _unclear_construct(node: Node) -> str | None:
    """Why ``node`` makes the line unclear: it runs first, or bash and /bin/sh differ on it."""
    kind = node.type
    if kind == "command_substitution":
        return "a command substitution ($(...) or `...`) runs first"
    if kind == "process_substitution":
        return "a process substitution (<(...) or >(...)) runs alongside"
    if kind == "compound_statement" and node.children and node.children[0].type == "((":
        return "((...)) is arithmetic to bash but two subshells to /bin/sh"
    if kind == "file_redirect" and any(c.type in ("&>", "&>>") for c in node.children):
        return "&> means 'redirect' to bash but '& then >' to /bin/sh"
    return None


def _walk(root: Node) -> Iterator[Node]:
    """Every node under ``root``, parents first; a stack, so deep nesting is no recursion."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def _redirect_words(statement: Node) -> list[Node]:
    """Words the grammar puts in a redirection that sh passes to the command.

    ``echo a >f b`` runs ``echo a b``: a file redirection's destinations after
    the first, and a here-document's trailing words, are arguments.
    """
    words: list[Node] = []
    for redirect in statement.children_by_field_name("redirect"):
        if redirect.type == "file_redirect":
            words.extend(redirect.children_by_field_name("destination")[1:])
        elif redirect.type == "heredoc_redirect":
            words.extend(redirect.children_by_field_name("argument"))
    return words


def _command(name: str, arguments: Sequence[_Word], *, more: bool, replaced: bool) -> SimpleCommand:
    words = [name]
    if replaced:
        return SimpleCommand(name + " ", "", "xargs puts what it reads into the arguments")
    for text, known in arguments:
        if not known:
            start = " ".join((*words, text))
            return SimpleCommand(
                start, "", "its arguments hold an expansion (a variable, a glob...)"
            )
        words.append(text)
    if more:
        return SimpleCommand(" ".join(words), " ", "xargs adds arguments it reads from its input")
    return SimpleCommand(" ".join(words))


def _file_name(text: str) -> str:
    return text.rsplit("/", 1)[-1]


def _runs_code(name: str, arguments: Sequence[_Word]) -> tuple[str | None, str | None]:
    """Why the command runs code the rules cannot see (None: it does not), and the script
    a shell is given inline, when it is known (it is read as well)."""
    try:
        if name in _RUNS_TEXT:
            raise _Unclear(f"{name} runs text as commands")
        if name in _RUNNERS:
            raise _Unclear(f"{name} runs a command given in its arguments")
        if name in (".", "source"):
            script = arguments[0] if arguments else ("", False)
            if not script[1] or script[0].startswith(_INPUT_FILES):
                raise _Unclear(f"{name} reads commands from its input or an expansion")
        elif name == "find":
            _check_find(arguments)
        elif name in _SHELLS:
            return _shell_script(name, arguments)
        else:
            interpreter = _INTERPRETERS.get(name)
            versioned = _VERSIONED.match(name)
            if interpreter is None and versioned is not None:
                interpreter = _INTERPRETERS.get(versioned.group(1))
            if interpreter is not None:
                _check_interpreter(name, interpreter, arguments)
    except _Unclear as unclear:
        return str(unclear), None
    return None, None


def _check_find(arguments: Sequence[_Word]) -> None:
    for text, known in arguments:
        if not known or text in _FIND_ACTIONS:
            action = text if known else "an expanded word"
            raise _Unclear(f"find with {action} runs or deletes what it finds")


def _shell_script(name: str, arguments: Sequence[_Word]) -> tuple[str | None, str | None]:
    """Why a shell runs code unseen (``sh -c``, ``sh`` reading stdin), and its inline script.

    Raises:
        _Unclear: An option or the operand is expanded.
    """
    index, inline = _shell_options(name, arguments)
    operand = arguments[index] if index < len(arguments) else None
    if not inline and operand is not None and operand[0] != "-":
        if operand[0].startswith(_INPUT_FILES):
            return f"{name} {operand[0]} runs code the rules cannot see", None
        return None, None  # a script file: it runs as a command of its own name
    if not inline:
        return f"{name} reading its input runs code the rules cannot see", None
    script = operand[0] if operand is not None and operand[1] else None
    return f"{name} -c runs code the rules cannot see", script


def _shell_options(name: str, arguments: Sequence[_Word]) -> tuple[int, bool]:
    """Where a shell's operand is, and whether an option (``-c``, ``-s``, ``-i``) runs code
    that is not in a file.

    Raises:
        _Unclear: An option is expanded.
    """
    inline = False
    index = 0
    while index < len(arguments):
        text, known = arguments[index]
        if not known:
            raise _Unclear(f"{name}'s arguments hold an expansion")
        if text == "--":
            return index + 1, inline
        if text in _SHELL_VALUED:
            index += 2
            continue
        if len(text) < 2 or text[0] not in "-+":
            break
        if not text.startswith("--") and any(letter in text[1:] for letter in "csi"):
            inline = True
        index += 1
    return index, inline


def _check_interpreter(name: str, interpreter: _Interpreter, arguments: Sequence[_Word]) -> None:
    """Refuses an interpreter's call whose code is inline or its input, not a file.

    Raises:
        _Unclear: The code is not in a file, or a word is expanded.
    """
    found = _interpreter_operand(name, interpreter, arguments)
    if found is None:
        return  # python -m module: the module runs, by name
    operand, program_given = found
    if operand is None or operand == "-" or operand.startswith(_INPUT_FILES):
        raise _Unclear(f"{name} reads code from its input")
    if interpreter.program_first and not program_given:
        raise _Unclear(f"{name}'s program is given inline")


def _interpreter_operand(
    name: str, interpreter: _Interpreter, arguments: Sequence[_Word]
) -> tuple[str | None, bool] | None:
    """The interpreter's first operand after its options, and whether ``-f`` named the
    program's file (awk -f FILE: the program is not the first operand). None: an option
    runs a module by name (python -m).

    Raises:
        _Unclear: An option runs code given inline, or a word is expanded.
    """
    program_given = False
    index = 0
    while index < len(arguments):
        text, known = arguments[index]
        if not known:
            raise _Unclear(f"{name}'s arguments hold an expansion")
        if text in interpreter.long or text.split("=", 1)[0] in interpreter.long:
            raise _Unclear(f"{name} {text} runs code given inline")
        if text == "--" or text == "-" or not text.startswith("-") or len(text) < 2:
            if text == "--":
                index += 1
            return (arguments[index][0] if index < len(arguments) else None), program_given
        taken = _interpreter_option(name, interpreter, text)
        if taken is None:
            return None
        program_given = program_given or (text[1] == "f" and "f" in interpreter.valued)
        index += taken
    return None, program_given


def _interpreter_option(name: str, interpreter: _Interpreter, text: str) -> int | None:
    """How many words the option ``text`` takes; None: it names a module to run.

    Raises:
        _Unclear: The option runs code given inline (``python -c``, ``perl -e``).
    """
    if text.startswith("--"):
        return 1
    letter = text[1]
    if letter in interpreter.stop:
        return None
    if letter in interpreter.valued:
        return 1 if len(text) > 2 else 2
    if any(c in interpreter.letters for c in text[1:]):
        raise _Unclear(f"{name} {text} runs code given inline")
    return 1


_INPUT_FILES: Final = ("/dev/", "/proc/")
"""Where a "file" of code is the command's input (``sh /dev/stdin <<EOF``)."""


# Words ---------------------------------------------------------------------------


def _text(node: Node, source: bytes) -> str:
    return source[node.start_byte : node.end_byte].decode()


def _literal(node: Node, source: bytes) -> _Word:
    """The word ``node`` after quote removal, and whether the shell would expand nothing.

    When it would, the text is what comes before the first expansion (``/tmp/``
    of ``/tmp/$X``), which every expansion of the word starts with.
    """
    kind = node.type
    if kind in ("command_name",) and node.named_child_count == 1:
        return _literal(node.named_children[0], source)
    text = _text(node, source)
    if kind in ("word", "concatenation") and _BRACES.search(text):
        return "", False  # r{m,} is rm to bash: brace expansion makes words anew
    if kind in ("word", "number"):
        return _unescape(text)
    if kind == "raw_string":
        return text[1:-1], True
    if kind == "string":
        return _string(node, source)
    if kind == "concatenation":
        return _concatenation(node, source)
    if kind == "variable_assignment":
        name = text.partition("=")[0]
        value_node = node.child_by_field_name("value")
        if value_node is None:
            return name + "=", True
        literal, known = _literal(value_node, source)
        return f"{name}={literal}", known
    return "", False  # an expansion, a substitution, $'...', $"...", arithmetic


def _concatenation(node: Node, source: bytes) -> _Word:
    parts: list[str] = []
    end = node.start_byte
    for child in node.children:
        if child.start_byte != end:  # a gap the grammar left unaccounted: not a plain word
            return "".join(parts), False
        text, known = _literal(child, source)
        parts.append(text)
        if not known:
            return "".join(parts), False
        end = child.end_byte
    return "".join(parts), end == node.end_byte


def _string(node: Node, source: bytes) -> _Word:
    """A double-quoted string: its content, unless something in it is expanded."""
    parts: list[str] = []
    for child in node.children:
        if child.type == '"':
            continue
        if child.type != "string_content":
            return "".join(parts), False
        content = _text(child, source)
        text, known = _unescape_quoted(content)
        parts.append(text)
        if not known:
            return "".join(parts), False
    return "".join(parts), True


_EXPANDED: Final = frozenset("*?[$`'\"")
_PLAIN: Final = re.compile(r"[^\\*?\[$`'\"~]*\Z")
_BRACES: Final = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")


def _unescape(text: str) -> _Word:
    """An unquoted word with its backslashes applied, up to anything sh would expand."""
    if _PLAIN.match(text):  # most words: nothing to remove, nothing expanded
        return text, True
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 < len(text) and text[index + 1] != "\n":
                out.append(text[index + 1])
            index += 2
            continue
        if char in _EXPANDED or (char == "~" and (index == 0 or text[index - 1] in "=:")):
            return "".join(out), False
        out.append(char)
        index += 1
    return "".join(out), True


def _unescape_quoted(text: str) -> _Word:
    """Double-quoted text: a backslash escapes only $ ` " \\ and a newline."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] in '$`"\\\n':
            if text[index + 1] != "\n":
                out.append(text[index + 1])
            index += 2
            continue
        if char in "$`":
            return "".join(out), False
        out.append(char)
        index += 1
    return "".join(out), True
