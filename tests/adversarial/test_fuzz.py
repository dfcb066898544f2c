"""Seeded fuzzing of the real daemon over stdio: malformed frames and bodies, each followed
by a sentinel request; every request gets exactly one answer, with the code protocol.md names.

Set ``IMPRINT_FUZZ_SEED`` to replay a run; the seed is in every failure message. Strings
holding ``%`` go into every string param, the method, the id, settings and the model's error
bodies (``fuzz_cases.PERCENT``), so no answer's logging may format them. Set
``IMPRINT_FUZZ_CASES`` to send more (or fewer) than the default 1,200 random cases; every
kind of case is also sent once before them, whatever the seed.
"""

from __future__ import annotations

import os
import random
from collections import Counter

from tests.adversarial.fuzz_cases import PERCENT, Case, CaseMaker
from tests.e2e.rawclient import RawClient

CASES = int(os.environ.get("IMPRINT_FUZZ_CASES", "1200"))


def test_malformed_frames_and_bodies_each_get_the_documented_answer(daemon_env, stub):
    seed = int(os.environ.get("IMPRINT_FUZZ_SEED", random.randrange(2**32)))
    print(f"fuzz seed {seed} (replay with IMPRINT_FUZZ_SEED={seed})")
    print(f"'%'-bearing strings tried in every string param and error path: {' '.join(PERCENT)}")
    maker = CaseMaker(random.Random(seed))
    makers = maker.all_makers()
    cases = [make() for make in makers] + [maker.rng.choice(makers)() for _ in range(CASES)]

    client = RawClient(daemon_env)
    answered: Counter = Counter()
    try:
        client.initialize()
        for number, case in enumerate(cases):
            stub.queue(*case.model_replies)
            client.proc.stdin.write(case.data)
            sentinel = f"sentinel-{number}"
            client.send({"id": sentinel, "method": "imprint/sessions", "params": {}})
            client.proc.stdin.flush()
            _expect(client, case, sentinel, answered, f"seed {seed}, case {number} ({case.name})")
        shutdown = client.request("shutdown")
        client.notify("exit")
        assert client.wait() == 0, f"seed {seed}: exit code; stderr:\n{client.stderr_text()[-3000:]}"
        late = [m for m in client.drain_messages() if "method" not in m and m.get("id") != shutdown]
        assert late == [], f"seed {seed}: answers after the last case: {late[:5]}"
    finally:
        client.kill()
    log = client.stderr_text()
    assert "internal error" not in log, f"seed {seed}: an internal error was logged:\n{log[-3000:]}"
    # A record that failed to format ('%' in an error text) costs its answer; a traceback
    # of a refusal costs kilobytes of log: neither may appear.
    assert "--- Logging error ---" not in log and "Traceback" not in log, f"seed {seed}:\n{log[-3000:]}"
    # Every id was answered exactly once across the whole run.
    assert [key for key, count in answered.items() if count > 1] == [], f"seed {seed}: answered twice"


def _expect(client: RawClient, case: Case, sentinel: str, answered: Counter, where: str) -> None:
    """Read until the sentinel's and the case's answers have all come; check each one."""
    waiting = {msg_id: code for msg_id, code in case.answers}
    nulls = 0
    sentinel_seen = False
    while waiting or not sentinel_seen:
        message = client.next()
        assert message is not None, f"{where}: the daemon closed its output; stderr:\n{client.stderr_text()[-3000:]}"
        if "method" in message:
            continue  # notifications (showMessage for refused settings) are not answers
        msg_id = message.get("id")
        answered[repr(msg_id)] += msg_id is not None
        if msg_id == sentinel:
            assert "result" in message, f"{where}: the sentinel failed: {message}"
            sentinel_seen = True
        elif msg_id is None:
            nulls += 1
            assert sentinel_seen is False, f"{where}: an id-null answer came after the sentinel: {message}"
            assert message["error"]["code"] == case.null_code, f"{where}: {message}"
        else:
            assert msg_id in waiting, f"{where}: unexpected answer {message}"
            code = waiting.pop(msg_id)
            got = message["error"]["code"] if "error" in message else None
            assert got == code, f"{where}: expected {code}, got {message}"
            if "error" in message:
                assert message["error"]["message"], f"{where}: an error without words: {message}"
    assert nulls == case.nulls, f"{where}: expected {case.nulls} id-null answers, got {nulls}"
