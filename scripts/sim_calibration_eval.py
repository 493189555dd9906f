"""The v13 evaluation (tests/data/sim_accuracy/v13_protocol.md): per deployment (source
family, model, GPU, TP, PP) of a measurements file, calibrate the roofline clock on its
first row that quotes a TTFT (kvcore.sim.calibrate.calibrate, the default terms, the
fast loop) and compare the default and the calibrated coefficients on its other rows.

    KVCORE_CHECK_INVARIANTS=0 python scripts/sim_calibration_eval.py \
        tests/data/sim_accuracy/measurements.json

(two processes; ~25 minutes on two loaded cores).  Output:
tests/data/sim_accuracy/v13_evaluation.txt.
"""
import concurrent.futures as cf
import json
import multiprocessing as mp
import statistics
import sys
from pathlib import Path

BASE = Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'sim_accuracy'

def dep_key(r):
    from kvcore.sim.accuracy import source_family
    return (source_family(r, 'v9'), r['model'], r['gpu'], r.get('tensor_parallel_size', 1), r.get('pipeline_parallel_size', 1))

def fix(r):
    r = dict(r)
    if r['config'].endswith('.json'):
        r['config'] = str(BASE / 'configs' / r['config'])
    return r

def one(args):
    key, cal, tests = args
    from kvcore.sim.accuracy import DEFAULT_EFFICIENCY, evaluate
    from kvcore.sim.calibrate import calibrate
    try:
        eff, b, a = calibrate([cal], sim='fast')
    except Exception as e:
        return key, None, str(e)
    d = evaluate(tests, DEFAULT_EFFICIENCY, sim='fast')
    c = evaluate(tests, eff, sim='fast')
    return key, (d, c, {k: getattr(eff, k) for k in ('request_overhead_s', 'memory', 'memory_hbm3', 'memory_gddr', 'compute')}), None

def main(files):
    rows = []
    for f in files:
        rows += [fix(r) for r in json.load(open(f))['rows']]
    deps = {}
    for r in rows:
        deps.setdefault(dep_key(r), []).append(r)
    jobs = []
    for key, rs in deps.items():
        cal = next((r for r in rs if 'ttft_ms' in r['measured'] and 'ttft_ms' not in (r.get('excluded') or {})), None)
        if cal is None or len(rs) < 2:
            continue
        jobs.append((key, cal, [r for r in rs if r is not cal]))
    print(f'{len(jobs)} deployments', file=sys.stderr)
    out = {'holdout': {'default': {}, 'calibrated': {}}, 'fit': {'default': {}, 'calibrated': {}}}
    per = []
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context('spawn')) as ex:
        for key, res, err in ex.map(one, jobs):
            if res is None:
                print('ERR', key, err)
                continue
            d, c, eff = res
            per.append((key, eff, d, c))
            for dr, cr in zip(d, c):
                for m in ('output_throughput', 'ttft_ms', 'tpot_ms'):
                    if m in dr:
                        out[dr['split']]['default'].setdefault(m, []).append(abs(dr[m]['error']))
                        out[dr['split']]['calibrated'].setdefault(m, []).append(abs(cr[m]['error']))
    for key, eff, d, c in per:
        print(key[0][:30], key[1][:28], key[2], 'tp', key[3], 'n', len(d), {k: v for k, v in eff.items()})
        for dr, cr in zip(d, c):
            print('   ', dr['id'][:60], dr['split'], ' '.join(f"{m[:4]} {100*dr[m]['error']:+.0f}->{100*cr[m]['error']:+.0f}" for m in ('output_throughput', 'ttft_ms', 'tpot_ms') if m in dr))
    for split in out:
        for which in ('default', 'calibrated'):
            print(split, which, {m: (len(v), round(100 * statistics.median(v), 1)) for m, v in out[split][which].items()})

if __name__ == '__main__':
    main(sys.argv[1:])
