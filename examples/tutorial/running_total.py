"""The tutorial's environment (docs/tutorial.md): numbers to add up, one per turn.

Each turn sends `{"add": n}`; the harness must answer `{"total": <sum so far>}`, so it
has to remember the earlier turns. The reward is the fraction of turns answered right.
"""

from episodes.envs.base import Environment
from episodes.models import ScoreResult, StepOutcome


class RunningTotal(Environment):
    def reset(self, task):  # the task's data -> the first message
        self.numbers = task.data["numbers"]
        self.turn = 0
        return {"add": self.numbers[0]}

    def step(self, reply):  # a reply -> the next message, or done
        self.turn += 1
        if self.turn == len(self.numbers):
            return StepOutcome(done=True)
        return StepOutcome(message={"add": self.numbers[self.turn]})

    def score(self, transcript):  # the whole transcript -> the reward
        total = right = 0
        for turn in transcript.turns:
            total += turn.message["add"]
            right += turn.reply == {"total": total}
        return ScoreResult(reward=right / max(1, len(transcript.turns)), details={"right": right})
