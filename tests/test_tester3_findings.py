"""Findings of the third fresh-eyes adversarial tester (issue 21 surfaces; the findings
and commands: tests/TESTER3_FINDINGS.md).  Every finding's test moved to its topic's file
once fixed:

- 1, 2, 11 (fastsim's traffic): tests/sim/test_fastsim_traffic.py; 5, 12, 13
  (spec_acceptance, ITL per chunk, Engine.now): tests/sim/test_sim_engine.py (fixa6);
- 3 (accuracy CLI): tests/sim/test_sim_accuracy_cli.py; 4 (not-fit error = ledger):
  tests/test_engines.py; 6, 9 (num_prompts, general dataset flags):
  tests/sim/test_sim_datasets.py; 7, 8 (client queue metrics, range-ratio dict):
  tests/sim/test_sim_bench_flags.py; 10 (traces from pipes):
  tests/sim/test_sim_traces_and_simulate.py; suspicion 2 (hybrid block sizes in tune):
  tests/sim/test_tune.py; suspicion 1 (prefix_repetition send times):
  tests/sim/test_sim_datasets.py (fixb6).
"""
