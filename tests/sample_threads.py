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


#: The README's flight-and-vet thread (OpenAI format): two turns, each answerable by one part of
#: "When does my flight to Lisbon leave? And when is the vet appointment for my dog?".
FLIGHT_AND_VET = [
    {"role": "user", "content": "Book me a flight from Berlin to Lisbon for October 20."},
    {"role": "assistant", "content": "Booked TAP flight TP 541, departing at 09:40 on October 20."},
    {"role": "user", "content": "Also, my dog Biscuit needs his vaccinations next week."},
    {"role": "assistant", "content": "Biscuit's vet appointment is on Thursday at 4 PM at Green Paws."},
]
