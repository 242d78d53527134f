"""d5core.overrides: the one rule for numbers set through environment variables."""

from __future__ import annotations

import pytest

from d5core.errors import UsageError
from d5core.overrides import is_positive_number, number_from_env

WORDS = {"must_be": "a positive number of widgets", "unset_to": "count them"}


@pytest.mark.parametrize("raw", [None, "", "  \t"])
def test_unset_or_blank_is_no_override(raw):
    environ = {} if raw is None else {"D5_WIDGETS": raw}
    assert number_from_env("D5_WIDGETS", environ=environ, **WORDS) is None


def test_the_value_is_read_around_blanks_and_from_os_environ(monkeypatch):
    assert number_from_env("D5_WIDGETS", environ={"D5_WIDGETS": " 2.5e3 "}, **WORDS) == 2500.0
    monkeypatch.setenv("D5_WIDGETS", "7")
    assert number_from_env("D5_WIDGETS", **WORDS) == 7.0


@pytest.mark.parametrize("raw", ["many", "0", "-1", "nan", "inf", "-inf", "1e400"])
def test_a_value_that_is_not_a_positive_number_is_one_line_naming_it(raw):
    with pytest.raises(UsageError) as caught:
        number_from_env("D5_WIDGETS", environ={"D5_WIDGETS": raw}, **WORDS)
    assert str(caught.value) == (
        f"D5_WIDGETS must be a positive number of widgets, not {raw!r}; fix it, "
        "or unset it to count them"
    )
    assert caught.value.exit_code == 2


def test_accept_decides_what_else_is_allowed_but_text_is_never_a_number():
    def fraction(value: float) -> bool:
        return 0.0 <= value < 1.0

    def read(raw: str) -> float | None:
        return number_from_env(
            "D5_SHARE", must_be="a fraction", unset_to="guess", accept=fraction,
            environ={"D5_SHARE": raw},
        )  # fmt: skip

    assert read("0") == 0.0 and read("0.25") == 0.25
    for raw in ("1", "-0.5", "abc", "nan"):
        with pytest.raises(UsageError, match=f"D5_SHARE must be a fraction, not {raw!r}"):
            read(raw)
    with pytest.raises(UsageError):
        number_from_env(
            "D5_ANY", must_be="a number", unset_to="skip", accept=lambda v: True,
            environ={"D5_ANY": "nan"},
        )  # fmt: skip


@pytest.mark.parametrize(
    ("value", "positive"),
    [(1, True), (0.5, True), (0, False), (-3.0, False), (float("nan"), False),
     (float("inf"), False), ("5", False), (None, False)],
)  # fmt: skip
def test_is_positive_number(value, positive):
    assert is_positive_number(value) is positive
