"""The worked example of docs/comparing.md: a guesser for the `guess-number` env.

    python guesser.py random    # guesses anywhere in the range it has narrowed
    python guesser.py bisect    # guesses the middle of it

`random` is a noisy agent: run the same eval twice and its scores differ by chance,
as a sampled model's do. `bisect` is the better agent of the two.
"""

import random
import sys

from episodes.harness import sdk

MODE = sys.argv[1] if len(sys.argv) > 1 else "random"
low = high = last = None


def guess(turn, message, emit):
    global low, high, last
    if "low" in message:  # the first message: the range
        low, high = int(message["low"]), int(message["high"])
    elif message.get("feedback") == "higher":
        low = last + 1
    elif message.get("feedback") == "lower":
        high = last - 1
    last = (low + high) // 2 if MODE == "bisect" else random.randint(low, high)
    return last


sdk.serve(guess)
