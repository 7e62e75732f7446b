"""BlockTracker: the open blocks after every piece equal a plain scan of the whole text, however the
text is cut into pieces (tags split across tokens, one byte per piece, whole text at once)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec.drafters.agentspec import BlockTracker, StructureSpec, TokenPieces
from specdec.drafters.agentspec.tracker import TrackerState

SPEC = StructureSpec.agent_default().with_resets(["<|im_start|>"])
FRAGMENTS = [
    "<tool_",
    "call>",
    "</tool",
    "_call>",
    "<tool_response>",
    "</tool_response>",
    "``",
    "`",
    "```",
    "x",
    "\n",
    "<",
    "/",
    ">",
    "<|im_",
    "start|>",
]


def scan_stacks(text: bytes, spec: StructureSpec) -> list[tuple[str, ...]]:
    """The open blocks after each byte prefix, by a plain left-to-right scan of the whole text.

    At each position: a reset string starting here closes every block; inside a block, its closing
    string starting here closes it; otherwise (where
    the innermost block nests) an opening string starting here opens one. A delimiter's bytes are
    consumed. ``stacks[i]`` = blocks open after ``text[:i]``; a partial delimiter leaves them as they are.
    """
    stacks = [()]
    stack: list[str] = []
    i = 0
    while i < len(text):
        step, change = 1, None
        close = spec.by_name(stack[-1]).close.encode() if stack else None
        reset = next((r.encode() for r in spec.resets if text.startswith(r.encode(), i)), None)
        if reset is not None:
            step, change = len(reset), "clear"
        elif close is not None and text.startswith(close, i):
            step, change = len(close), "pop"
        elif not stack or spec.by_name(stack[-1]).nests:
            for d in spec.delimiters:
                if text.startswith(d.open.encode(), i):
                    step, change = len(d.open.encode()), d.name
                    break
        # the delimiter's bytes before its last one leave the stack as it was
        stacks.extend([tuple(stack)] * (step - 1))
        if change == "clear":
            stack.clear()
        elif change == "pop":
            stack.pop()
        elif change is not None:
            stack.append(change)
        stacks.append(tuple(stack))
        i += step
    return stacks


@given(
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join),
    st.lists(st.integers(min_value=0, max_value=400), max_size=30),
)
def test_any_cut_of_the_text_gives_the_scans_blocks(text, cuts):
    data = text.encode()
    cut_points = sorted({c for c in cuts if 0 < c < len(data)}) + [len(data)]
    expected = scan_stacks(data, SPEC)
    tracker = BlockTracker(SPEC)
    start = 0
    for end in cut_points:
        tracker.feed(data[start:end])
        assert tracker.stack == expected[end], (data, start, end)
        start = end


def test_one_byte_pieces_and_whole_text_agree_on_a_nested_example():
    text = b'Plan.<tool_call>{"code": "```py\nprint(\'<tool_call>\')\n```"}</tool_call> done ```sh\nls\n```'
    whole = BlockTracker(SPEC)
    whole.feed(text)
    assert whole.stack == () and whole.state.tail == b""
    bytewise = BlockTracker(SPEC)
    seen = []
    for b in text:
        bytewise.feed(bytes([b]))
        seen.append(bytewise.block)
    assert seen == [s[-1] if s else None for s in scan_stacks(text, SPEC)[1:]]
    assert "code" in seen and "tool_call" in seen
    # inside the code fence the quoted tag does not open a tool call
    assert seen[text.index(b"print") + 8] == "code"


def test_tags_split_across_tokens_of_an_adversarial_vocabulary():
    pieces = TokenPieces([b"<", b"tool", b"_", b"call", b">", b"</", b"`", b"``", b"x", b"<tool_call", b">`", b"``x"])
    tracker = BlockTracker(SPEC)
    blocks = []
    # "<tool_call>" as <|tool|_|call|>, then "```" as `|``, closed as </|tool|_|call|>, reopened as <tool_call|>`
    for token in [0, 1, 2, 3, 4, 6, 7, 8, 6, 7, 5, 1, 2, 3, 4, 9, 10, 11]:
        tracker.feed(pieces[token])
        blocks.append(tracker.block)
    assert blocks == [None] * 4 + ["tool_call", "tool_call", "code", "code", "code", "tool_call"] + ["tool_call"] * 4 + [
        None,
        None,
        "tool_call",
        "code",
    ]


def test_restore_returns_to_a_snapshot_and_checks_it():
    tracker = BlockTracker(SPEC)
    tracker.feed(b"<tool_call>``")
    snap = tracker.state
    tracker.feed(b"`</tool_call>")
    tracker.restore(snap)
    tracker.feed(b"`")
    assert tracker.stack == ("tool_call", "code")
    with pytest.raises(ValueError, match="state"):
        tracker.restore(TrackerState(("latex",), b""))
    with pytest.raises(TypeError, match="piece"):
        tracker.feed("text")


def test_a_lone_fence_in_one_message_does_not_invert_the_next():
    text = b"<|im_start|>system\nAnswer in a ```python block.<|im_end|>\n<|im_start|>assistant\n```python\nx = 1\n```\nDone."
    tracker = BlockTracker(SPEC)
    tracker.feed(text[: text.index(b"x = 1")])
    assert tracker.block == "code"
    tracker.feed(text[text.index(b"x = 1") :])
    assert tracker.block is None
