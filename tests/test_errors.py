"""harness.errors: messages for people, one line each, saying where, what was found and what
would be right; values quoted short, terminal controls never printed raw."""

from __future__ import annotations

import errno

from harness.errors import UserInputError, as_field, did_you_mean, fault_line, one_of, quote


def test_an_input_error_says_file_line_and_field_before_the_message() -> None:
    error = UserInputError("expected one of bf16, fp16", file="s.yaml", line=3, field="dtype")
    assert str(error) == "s.yaml:3: dtype: expected one of bf16, fp16"
    assert str(UserInputError("bad", field="models[0]")) == "models[0]: bad"
    assert str(UserInputError("bad", file="s.yaml")) == "s.yaml: bad"
    assert str(UserInputError("bad")) == "bad"


def test_an_input_error_never_prints_a_terminal_control_raw() -> None:
    error = UserInputError("red \x1b[31m\nnext", file="a\nb.yaml")
    # the escape becomes text; a file name stays on one line; a message keeps its newline
    assert str(error) == "a\\nb.yaml: red \\x1b[31m\nnext"


def test_a_long_value_is_quoted_cut_to_forty_characters() -> None:
    assert quote("bf16") == "'bf16'"
    # repr of 40 x's is 42 characters: the first 39 and an ellipsis
    assert quote("x" * 50) == "'" + "x" * 38 + "…"
    assert len(quote("x" * 50)) == 40
    assert quote(list(range(9))) == "<list of 9 items>"
    assert quote([1, 2]) == "[1, 2]"


def test_a_near_miss_is_told_and_a_far_one_or_a_long_one_is_not() -> None:
    # SequenceMatcher('bf61', 'bf16'): 'bf' + '6' match, 2*3/8 = 0.75 >= 0.6; 'fp16': 2*2/8 = 0.5
    assert did_you_mean("bf61", ["bf16", "fp16"]) == " (did you mean 'bf16'?)"
    assert did_you_mean("zzzz", ["bf16", "fp16"]) == ""
    assert did_you_mean("a" * 81, ["a" * 81]) == ""  # over 2 * 40 characters: no typo


def test_the_choices_listed_fit_the_limit_and_say_how_many_more() -> None:
    assert one_of(["a", "b", "c"]) == "a, b, c"
    # each shown choice takes 2 + 2 characters: 4 shown take 16, a 5th fits (16 + 2 <= 20),
    # a 6th does not (20 + 2 > 20)
    choices = [f"c{i}" for i in range(10)]
    assert one_of(choices, limit=20) == "c0, c1, c2, c3, c4, … (5 more)"
    assert one_of(["a" * 100], limit=5) == quote("a" * 100)  # at least one, quoted short


def test_a_key_becomes_a_field_quoted_short_without_its_quotes() -> None:
    assert as_field("dtype") == "dtype"
    assert as_field("k" * 50) == "k" * 38 + "…"


def test_a_machine_fault_is_one_line_naming_the_path_and_other_os_errors_are_not() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/runs/a/row.json")
    assert fault_line(full) == (
        "'/runs/a/row.json': no space left on the device (ENOSPC); what was written is kept: "
        "fix it and run the command again (measure and run resume where they stopped)"
    )
    read_only = fault_line(OSError(errno.EROFS, "x"))  # no file named: '?'
    assert read_only is not None and read_only.startswith("'?': the file system is read-only")
    assert fault_line(FileNotFoundError(errno.ENOENT, "gone", "/x")) is None
