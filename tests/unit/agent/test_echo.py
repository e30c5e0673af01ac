"""An answer that only copies its own prompt is an echo; an answer of its own is not."""

from __future__ import annotations

from agentsim.agent.echo import MIN_ECHO_CHARS, echoes

PROMPT = (
    "<observation>\ntick: 3\nYou have 2 new posts in your feed and no new message. "
    "Your opinion on the new park is -0.67 (-1 against, +1 for).\n</observation>\n"
    "<question>What do you think of the new park?</question>"
)


def test_a_sentence_of_the_prompt_is_an_echo_whatever_its_spacing_case_or_quotes() -> None:
    assert echoes("Your opinion on the new park is -0.67 (-1 against, +1 for).", PROMPT)
    assert echoes('  "your opinion on the new  park is -0.67\n(-1 against, +1 for)."', PROMPT)
    assert echoes("What do you think of the new park?", PROMPT)


def test_an_answer_made_only_of_prompt_sentences_is_an_echo() -> None:
    answer = "What do you think of the new park?\ntick: 3"
    assert echoes(answer, PROMPT)


def test_an_answer_of_its_own_is_no_echo() -> None:
    assert not echoes("I am against the park: it replaces the parking lot.", PROMPT)
    # One sentence of its own is enough.
    assert not echoes("Your opinion on the new park is -0.67. I still like it.", PROMPT)


def test_short_answers_are_never_echoes() -> None:
    assert "tick: 3" in PROMPT and len("tick: 3") < MIN_ECHO_CHARS
    assert not echoes("tick: 3", PROMPT)
    assert not echoes("", PROMPT)
