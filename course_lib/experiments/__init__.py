"""Small, honest experiments on a real model: rates with confidence intervals.

An experiment runs one or more *conditions* (say, a vague and a specific tool
description) over a set of labelled prompts, several *trials* each (different seeds),
scores every response as a success or not, and reports each condition's success rate
with a Wilson 95% interval: the range of true rates that fit what was observed. Two
conditions whose intervals overlap a lot have not been shown to differ.

Every request and response is kept, so a surprising number can be traced back to the
exact text the model wrote. Results are saved as JSON under ``data/results/``.

Set ``COURSE_QUICK=1`` to shrink trial counts (CI does): the pipeline runs end to end in
a fraction of the time, and its numbers are then only a smoke test. ``COURSE_WORKERS``
(default 4) is how many requests are in flight at once (``run_all``): the course's server
decodes them together and answers each exactly as it would alone, so on it the records are
the same with 1 worker or 4, only sooner, apart from what measures time (a record's seconds,
a limit in seconds). Another server may batch in a way that changes answers.

One module per part: ``statistics`` (rates, Wilson intervals, a rate as text), ``runner``
(conditions, trials, records, saved results). The plots are in ``course_lib.display``
(``plot_rates``), above this layer.
"""

from course_lib.config import quick_mode, workers
from course_lib.experiments.runner import (
                     Experiment,
                     Prompt,
                     Record,
                     load_rates,
                     raw_sender,
                     raw_tool_request,
                     right_call,
                     run_all,
                     run_condition,
                     save,
                     save_rates,
                     trials,
)
from course_lib.experiments.statistics import Rate, rate_text, wilson_interval

__all__ = ["Experiment", "Prompt", "Rate", "Record", "load_rates", "quick_mode", "rate_text", "raw_sender",
           "raw_tool_request", "right_call", "run_all", "run_condition", "save", "save_rates", "trials",
           "wilson_interval", "workers"]
