#!/usr/bin/env python3
"""Kills `kiln train mlp --resume STATE --save-every 1` with SIGKILL at random moments, some of them during a
save of STATE, resumes it each time, and checks that the run that was killed and resumed ends with the same
parameters, bit for bit (the same --save file, byte for byte), as a run never stopped; and that every state file
a kill left behind loads (never a torn file). CPU, over the small IDX set of check_train_cli.py; dropout, Adam
and a shuffled loader, so the generator, the moments and the data position all have to resume.

usage: check_train_resume.py KILN_BINARY WORK_DIR
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_train_cli import write_set  # noqa: E402

MIN_KILLS_DURING_SAVE = 2


def fail(msg):
    print("check_train_resume: FAIL: " + msg)
    sys.exit(1)


def command(kiln, folder, model, *extra):
    # A wide model makes each save (about 10 MB, fsynced) a large share of a step, so kills land inside saves.
    return [kiln, "train", "mlp", "--device", "cpu", "--data", folder, "--epochs", "3", "--batch", "40",
            "--hidden", "1000,1000", "--dropout", "0.2", "--optimizer", "adam", "--seed", "5", "--save", model,
            *extra]


def temporaries(folder, name):
    return [f for f in os.listdir(folder) if f.startswith("." + name + ".tmp.")]


def torn(path):
    """What is wrong with a safetensors file, or None: its header parses and its data ends where the file does."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        return f"{len(data)} bytes"
    n = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        return f"its header does not parse ({e})"
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != len(data):
        return f"its entries end at byte {8 + n + end} of {len(data)}"
    return None


def main():
    if len(sys.argv) != 3:
        fail(__doc__)
    kiln, work = sys.argv[1], os.path.join(sys.argv[2], "resume")
    folder = os.path.join(work, "idx")
    os.makedirs(folder, exist_ok=True)
    write_set(folder, "train", 400)
    write_set(folder, "t10k", 40)
    straight_model = os.path.join(work, "straight.safetensors")
    model = os.path.join(work, "resumed.safetensors")
    state = os.path.join(work, "state.safetensors")
    for f in (straight_model, model, state):
        if os.path.exists(f):
            os.remove(f)
    for f in temporaries(work, "state.safetensors"):
        os.remove(os.path.join(work, f))

    start = time.monotonic()
    run = subprocess.run(command(kiln, folder, straight_model), capture_output=True, text=True, timeout=600)
    straight_seconds = time.monotonic() - start
    if run.returncode != 0:
        fail(f"the uninterrupted run exited with {run.returncode}: {run.stderr[-2000:]}")

    rng = random.Random(int(os.environ.get("KILN_RESUME_SEED", "0")) or None)
    resumed_cmd = command(kiln, folder, model, "--resume", state, "--save-every", "1")
    # "save": killed as soon as a save's temporary file appears (inside the save, before its rename), in the
    # first to fourth save of the start;
    # "random": killed at a random moment. The run is then let finish.
    plan = ["save", "random", "save", "random", "save", "random", "random"]
    kills = {"save": 0, "random": 0}
    finished = None
    for how in plan + ["finish"]:
        proc = subprocess.Popen(resumed_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if how == "save":  # inside the n-th save of this start (each save's temporary has its own name)
            seen, wanted = set(), rng.randint(1, 4)
            while proc.poll() is None:
                seen.update(temporaries(work, "state.safetensors"))
                if len(seen) >= wanted:
                    break
                time.sleep(0.0005)
        elif how == "random":
            deadline = time.monotonic() + rng.uniform(0.05, 0.5) * straight_seconds
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
        if how != "finish" and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()
            left = temporaries(work, "state.safetensors")
            # A save may finish between the look and the kill: only a temporary left behind proves the kill
            # landed inside one.
            kills["save" if left else "random"] += 1
            for f in left:  # what a killed save leaves: harmless, removed here to see the next one
                os.remove(os.path.join(work, f))
            if os.path.exists(state):
                problem = torn(state)
                if problem:
                    fail(f"after a kill ({how}): {state} is torn: {problem}")
            continue
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            fail(f"a resumed run exited with {proc.returncode}: {err[-2000:]}")
        finished = how
        break
    if finished is None:
        fail("the killed run never finished")
    print(f"{kills['save']} kills inside a save, {kills['random']} at random moments; uninterrupted run "
          f"{straight_seconds:.1f} s")
    if kills["save"] < MIN_KILLS_DURING_SAVE:
        fail(f"only {kills['save']} kills landed inside a save (wanted {MIN_KILLS_DURING_SAVE})")
    with open(straight_model, "rb") as f:
        want = f.read()
    with open(model, "rb") as f:
        got = f.read()
    if want != got:
        fail(f"the resumed run's parameters ({model}) differ from the uninterrupted run's ({straight_model})")
    print("check_train_resume: ok (parameters bit-identical)")


if __name__ == "__main__":
    main()
