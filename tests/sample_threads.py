"""Small hand-written chat threads shared by the index and hybrid tests."""

from __future__ import annotations


def thread(pairs: list[tuple[str, str]], day: int = 1) -> list[dict]:
    """OpenAI-format messages: one (user, assistant) pair per turn, timestamped an hour apart."""
    msgs = []
    for i, (user, assistant) in enumerate(pairs):
        msgs.append({"role": "user", "content": user, "timestamp": f"2026-10-{day:02d}T{9 + i:02d}:00:00"})
        msgs.append({"role": "assistant", "content": assistant})
    return msgs


GARDEN = thread(
    [
        (
            "The tomatoes in the back garden have blight on their lower leaves.",
            "Remove the affected leaves and water at the base.",
        ),
        ("Our dentist appointment moved to Thursday at 3 pm.", "Noted: dentist on Thursday at 3 pm."),
        (
            "I want to repaint the kitchen cabinets a dark green colour.",
            "A satin finish in forest green would suit oak worktops.",
        ),
        (
            "Remind me that the car insurance renews on the 14th of November.",
            "I will remind you before the car insurance renewal.",
        ),
    ]
)
