"""REPL harness: one Python namespace that lives across turns.

    python -m episodes.harness.reference.repl

Each turn's message is Python source (a string, or `{"code": "..."}`). The snippet
runs in the same namespace as every earlier one, so `x = 20` in turn 0 is still
there in turn 2. The reply is the text an interactive session would show: what the
snippet printed (stdout and stderr, interleaved), then the repr of its last
statement when that is an expression with a value other than None (also bound to
`_`). A snippet that raises replies with the traceback text; the harness stays up.
stdin is empty while a snippet runs, so `input()` raises EOFError instead of
reading the protocol stream.

Speaks the harness wire protocol on stdin/stdout (run it under a host, e.g.
`command: "{python} -m episodes.harness.reference.repl"`); stdlib + `episodes.harness.sdk` only.
"""

from __future__ import annotations

import ast
import contextlib
import io
import linecache
import sys
import traceback
from typing import Any

from episodes.harness import sdk


class Repl:
    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}

    def handle(self, turn: int, message: Any, emit: Any) -> str:
        if isinstance(message, dict) and isinstance(message.get("code"), str):
            message = message["code"]
        if not isinstance(message, str):
            raise ValueError(f"expected Python source as a string, got {type(message).__name__}")
        return self.run(message, f"<turn {turn}>")

    def run(self, source: str, filename: str) -> str:
        # Registered so tracebacks (also later ones through functions defined here) show lines.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        out = io.StringIO()
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(out),
            _empty_stdin(),
        ):
            try:
                body, last = _split_last_expression(source, filename)
            except SyntaxError:
                out.write("".join(traceback.format_exception_only(*sys.exc_info()[:2])))
                return out.getvalue()
            try:
                if body is not None:
                    exec(body, self.namespace)
                if last is not None:
                    value = eval(last, self.namespace)
                    if value is not None:
                        self.namespace["_"] = value
                        print(repr(value))
            except (Exception, SystemExit) as e:
                # Drop our own frame: the traceback starts in the snippet, like a REPL's.
                tb = e.__traceback__.tb_next if e.__traceback__ else None
                out.write("".join(traceback.format_exception(type(e), e, tb)))
        return out.getvalue()


def _split_last_expression(source: str, filename: str) -> tuple[Any, Any]:
    """Code for all statements but a trailing expression, and that expression (or None)."""
    tree = ast.parse(source, filename, "exec")
    last = None
    tail = tree.body[-1] if tree.body else None
    if isinstance(tail, ast.Expr):
        tree.body.pop()
        last = compile(ast.Expression(tail.value), filename, "eval")
    body = compile(tree, filename, "exec") if tree.body else None
    return body, last


@contextlib.contextmanager
def _empty_stdin() -> Any:
    saved = sys.stdin
    sys.stdin = io.StringIO()
    try:
        yield
    finally:
        sys.stdin = saved


def main() -> None:
    sdk.serve(Repl().handle)


if __name__ == "__main__":
    main()
