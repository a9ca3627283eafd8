"""The training progress bar follows the time budget when that ends the run."""

from __future__ import annotations

from seq2seq.train.progress import TrainingBar


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_time_budget_run_shows_the_steps_it_will_reach_not_max_steps():
    clock = _Clock()
    # 30 minutes of budget, max_steps far beyond what fits: the bar once said 0/20000, 3 hours.
    bar = TrainingBar(
        max_steps=20_000, start_step=0, deadline=clock.now + 1800, enabled=False, clock=clock
    )
    for step in range(1, 101):
        clock.now += 0.6  # 100 steps a minute
        bar.advance(step)
    assert bar.bar.total == 100 + int(100 / 60 * (1800 - 60))  # 3,000 steps at the deadline
    assert bar.step == 100
    bar.close()


def test_max_steps_stays_the_total_when_it_comes_before_the_deadline_or_without_one():
    clock = _Clock()
    bar = TrainingBar(
        max_steps=300, start_step=0, deadline=clock.now + 1800, enabled=False, clock=clock
    )
    for step in range(1, 51):
        clock.now += 0.1
        bar.advance(step)
    assert bar.bar.total == 300
    untimed = TrainingBar(max_steps=300, start_step=120, enabled=False, clock=clock)
    untimed.advance(121)
    assert (untimed.bar.total, untimed.step) == (300, 121)


def test_a_resumed_run_projects_from_its_own_steps_and_never_below_the_step_reached():
    clock = _Clock()
    bar = TrainingBar(
        max_steps=20_000, start_step=4_000, deadline=clock.now + 60, enabled=False, clock=clock
    )
    for step in range(4_001, 4_011):
        clock.now += 10.0  # past the deadline by the last step
        bar.advance(step)
    assert bar.bar.total == 4_010
