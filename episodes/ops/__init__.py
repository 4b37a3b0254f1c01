"""Operating a deployment: `episodes doctor` (is the setup sound?) and schedules (batches
the server starts on a cron).

`doctor` (the checks and `episodes setup`), `doctor_local` (the checks of this
machine: runtimes, sandboxes), `doctor_priority` (does the server honour priority and
fairness keys?), `schedules` (Temporal Schedules that start batch workflows).
"""
