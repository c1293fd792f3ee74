"""What a model or a tool wrote reaches a terminal inert (mur.cli.render.terminal_safe)."""

from __future__ import annotations

import io

from mur.cli.render import terminal_safe


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_control_sequences_are_shown_not_obeyed_on_a_terminal():
    hostile = "done\x1b]0;owned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07 ok\rfake line\r\nnext\tcol\x9b31m"
    shown = terminal_safe(hostile, Tty())
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    assert shown == ("done\\x1b]0;owned\\x07\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07 ok\\x0dfake line\r\nnext\tcol"
                     "\\x9b31m")  # newlines (CRLF too) and tabs stay


def test_a_pipe_gets_the_text_as_it_is():
    text = "raw \x1b[1mbytes\x1b[0m\n"
    assert terminal_safe(text, io.StringIO()) == text
