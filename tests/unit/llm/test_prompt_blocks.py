"""The declaration of the prompt's blocks: rendering a part, finding a block, and the rules
a declaration keeps (prompt order, one declaration per tag, per-step blocks in the turn)."""

from __future__ import annotations

import pytest

from agentsim.llm.prompt_blocks import BLOCKS, PARTS, Block, PromptBlocks


def test_the_declared_blocks_by_part_in_prompt_order() -> None:
    assert [b.name for b in BLOCKS.of("system")] == [
        "instructions",
        "tool_calls",
        "available_skills",
    ]
    assert [b.name for b in BLOCKS.of("agent")] == [
        "skill_content",
        "active_skills",
        "persona",
        "profile",
        "more_skills",
    ]
    assert [b.name for b in BLOCKS.of("turn")] == [
        "observation",
        "messages",
        "feedback",
        "memory",
        "question",
        "skill_hooks",
    ]
    assert [b.part for b in BLOCKS.blocks] == sorted(
        (b.part for b in BLOCKS.blocks), key=PARTS.index
    )
    assert "memory" in BLOCKS and "world_news" not in BLOCKS
    assert not any(b.step_input for b in BLOCKS.blocks)


@pytest.mark.parametrize(
    ("name", "text", "rendered"),
    [
        ("question", "Why?", "<question>Why?</question>"),
        ("question", "", "<question></question>"),
        ("memory", "a\nb", "<memory>\na\nb\n</memory>"),
        ("memory", "", "<memory>\n\n</memory>"),
        ("skill_hooks", "<skill_hooks>\nx\n</skill_hooks>", "<skill_hooks>\nx\n</skill_hooks>"),
    ],
)
def test_render_then_find_gives_the_text_back(name: str, text: str, rendered: str) -> None:
    block = BLOCKS[name]
    assert block.render(text) == rendered
    found = block.find(f"before\n{rendered}\nafter")
    assert found == (text if block.form != "given" else "\nx\n")


def test_find_takes_the_first_block_and_an_unclosed_one_runs_to_the_end() -> None:
    memory = BLOCKS["memory"]
    assert memory.find("<memory>\none\n</memory>\n<memory>\ntwo\n</memory>") == "one"
    assert memory.find("x <memory>\nopen to the end\n") == "open to the end\n"
    assert memory.find("no block here") is None
    assert BLOCKS["question"].find("<question>open") == "open"


def test_each_reads_attributes_and_skips_longer_tags() -> None:
    text = (
        '<skill_contents name="no">x</skill_contents>\n'
        '<skill_content name="a&amp;b">\nfirst\n</skill_content>\n'
        '<skill_content name="c" extra="1">second</skill_content>\n'
        "<skill_content>bare"
    )
    assert list(BLOCKS["skill_content"].each(text)) == [
        ({"name": "a&b"}, "\nfirst\n"),
        ({"name": "c", "extra": "1"}, "second"),
        ({}, "bare"),
    ]
    assert list(BLOCKS["skill_content"].each("nothing")) == []


def test_a_part_renders_in_declared_order_and_leaves_out_blocks_without_text() -> None:
    texts = {"question": "Why?", "observation": "tick: 1", "messages": None, "feedback": ""}
    assert BLOCKS.parts("turn", texts) == [
        "<observation>\ntick: 1\n</observation>",
        "<feedback>\n\n</feedback>",
        "<question>Why?</question>",
    ]
    assert BLOCKS.render("agent", {"persona": "Ana.", "profile": "{}"}) == (
        "<persona>Ana.</persona>\n<profile>{}</profile>"
    )
    assert BLOCKS.render("turn", {}) == ""


def test_a_text_for_a_block_of_another_part_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        BLOCKS.render("turn", {"observation": "x", "persona": "Ana.", "nope": "y"})
    assert str(err.value) == "not blocks of the turn part of the prompt: nope, persona"


def test_split_user_cuts_at_the_turns_first_block() -> None:
    mine = "<persona>Ana.</persona>\n"
    turn = "<observation>\ntick: 1\n</observation>"
    assert BLOCKS.split_user(mine + turn) == (mine, turn)
    assert BLOCKS.split_user(turn) == ("", turn)
    assert BLOCKS.split_user("no turn at all") == ("", "no turn at all")


def test_unknown_blocks_are_named_with_the_declared_ones() -> None:
    with pytest.raises(KeyError, match="no prompt block 'news' \\(declared: instructions, "):
        BLOCKS["news"]
    with pytest.raises(ValueError) as err:
        BLOCKS.step_block("observation")
    assert str(err.value) == (
        "'observation' is not a per-step input block of the prompt (declared: none); "
        "declare it in agentsim/llm/prompt_blocks.py with step_input=True"
    )
    news = PromptBlocks((*BLOCKS.blocks, Block("news", "turn", "lines", step_input=True)))
    assert news.step_block("news").name == "news"


def test_a_declaration_keeps_prompt_order_and_one_block_per_tag() -> None:
    with pytest.raises(ValueError) as err:
        PromptBlocks((Block("a", "turn", "lines"), Block("b", "system", "inline")))
    assert str(err.value) == (
        "prompt blocks must be declared in prompt order (system, agent, turn): a (turn), b (system)"
    )
    with pytest.raises(ValueError) as err:
        PromptBlocks((Block("a", "turn", "lines"), Block("a", "turn", "inline")))
    assert str(err.value) == "prompt blocks declared twice: a"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"part": "agent", "form": "lines", "step_input": True},
            "block 'x': a per-step input is an inline or lines block of the turn (it changes "
            "every step), not a lines block of the agent",
        ),
        (
            {"part": "turn", "form": "given", "step_input": True},
            "block 'x': a per-step input is an inline or lines block of the turn (it changes "
            "every step), not a given block of the turn",
        ),
        ({"part": "header", "form": "lines"}, "block 'x': part 'header' is not one of "),
        ({"part": "turn", "form": "table"}, "block 'x': form 'table' is not inline, lines or"),
    ],
)
def test_a_block_is_checked_when_declared(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as err:
        Block("x", **kwargs)  # type: ignore[arg-type]
    assert str(err.value).startswith(message)
