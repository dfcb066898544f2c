"""``offload.ToLoop``: what the model thread hands to the event loop (each token's text) runs
there in the order given, while the thread goes on without waiting; a call that fails is kept
for the thread's owner to raise, and nothing after it runs."""

from __future__ import annotations

import asyncio
import threading

from imprintd.offload import ToLoop


async def test_calls_run_on_the_loop_in_the_order_handed_over_and_the_thread_does_not_wait():
    to_loop = ToLoop(asyncio.get_running_loop())
    ran: list[tuple[int, bool]] = []
    handed_over = threading.Event()

    def note(n: int) -> None:
        ran.append((n, threading.current_thread() is threading.main_thread()))

    def work() -> None:
        for n in range(500):
            to_loop.call(note, n)
        handed_over.set()

    thread = threading.Thread(target=work)
    thread.start()
    # The loop thread is held here, so nothing runs on it: a thread that waited for each call
    # to run would never get through its calls.
    assert handed_over.wait(timeout=60), "the thread waited for the loop"
    thread.join()
    assert ran == []
    await asyncio.sleep(0)  # the loop's next turn runs every call pending, in order
    assert ran == [(n, True) for n in range(500)]
    assert to_loop.failure is None


async def test_calls_handed_over_before_a_thread_ends_have_run_when_its_result_arrives():
    to_loop = ToLoop(asyncio.get_running_loop())
    ran: list[int] = []
    await asyncio.to_thread(lambda: [to_loop.call(ran.append, n) for n in range(100)])
    assert ran == list(range(100))  # what LocalModel relies on to raise a failure after the thread


async def test_a_call_that_fails_is_kept_the_owner_told_and_later_calls_dropped():
    told = threading.Event()
    to_loop = ToLoop(asyncio.get_running_loop(), on_failure=told.set)
    ran: list[int] = []

    def note(n: int) -> None:
        if n == 3:
            raise ValueError("the client went away")
        ran.append(n)

    await asyncio.to_thread(lambda: [to_loop.call(note, n) for n in range(6)])
    assert ran == [0, 1, 2]
    assert isinstance(to_loop.failure, ValueError) and str(to_loop.failure) == "the client went away"
    assert told.is_set()


async def test_calls_within_the_interval_wait_for_the_next_turn_or_the_owner_in_order():
    to_loop = ToLoop(asyncio.get_running_loop(), every=3600.0)
    ran: list[int] = []
    await asyncio.to_thread(lambda: [to_loop.call(ran.append, n) for n in range(5)])
    # The first call woke the loop and every call before that turn joined it; the thread went on.
    taken = list(ran)
    assert taken and taken == list(range(len(taken)))
    await asyncio.to_thread(lambda: [to_loop.call(ran.append, n) for n in range(5, 8)])
    assert ran == taken  # within the interval: no wake-up asked for
    to_loop.run_pending()  # the owner, once the thread is done
    assert ran == list(range(8))


async def test_text_waiting_for_the_same_turn_joins_into_one_call_in_order_with_the_rest():
    to_loop = ToLoop(asyncio.get_running_loop(), every=3600.0)
    ran: list[tuple[str, str]] = []

    def text(piece: str) -> None:
        ran.append(("text", piece))

    def thought(piece: str) -> None:
        ran.append(("thought", piece))

    def hand_over() -> None:
        for piece in ("Hel", "lo", ","):
            to_loop.join(text, piece)
        to_loop.join(thought, "hm")
        to_loop.join(text, " world")
        to_loop.call(ran.append, ("call", "end"))
        to_loop.join(text, "!")

    to_loop.run_pending()  # nothing yet
    await asyncio.to_thread(hand_over)
    to_loop.run_pending()
    # What woke the loop went on its own; after it, pieces joined until another callback came.
    text_sent = "".join(piece for kind, piece in ran if kind == "text")
    assert text_sent == "Hello, world!"
    assert [kind for kind, _ in ran if kind != "text"] == ["thought", "call"]
    assert ran[-4:] == [("thought", "hm"), ("text", " world"), ("call", "end"), ("text", "!")]
    assert len(ran) <= 6  # "Hel" may have gone alone when the first piece woke the loop


async def test_joined_text_still_wakes_the_loop_once_the_interval_has_passed():
    to_loop = ToLoop(asyncio.get_running_loop(), every=0.0)
    ran: list[str] = []
    delivered = asyncio.Event()

    def text(piece: str) -> None:
        ran.append(piece)
        if "".join(ran) == "abc":
            delivered.set()

    await asyncio.to_thread(lambda: [to_loop.join(text, piece) for piece in "abc"])
    await asyncio.wait_for(delivered.wait(), timeout=60)  # no owner's run_pending needed
    assert "".join(ran) == "abc"
