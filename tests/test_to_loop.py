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


async def test_with_an_interval_the_thread_wakes_the_loop_once_and_the_owner_takes_the_rest_in_order():
    to_loop = ToLoop(asyncio.get_running_loop(), every=3600.0)
    ran: list[int] = []
    await asyncio.to_thread(lambda: [to_loop.call(ran.append, n) for n in range(5)])
    # The first call woke the loop and every call before that turn joined it; the thread went on.
    taken = list(ran)
    assert taken and taken == list(range(len(taken)))
    await asyncio.to_thread(lambda: [to_loop.call(ran.append, n) for n in range(5, 8)])
    await asyncio.sleep(0)
    assert ran == taken  # the thread woke it once only; the loop's timer has not come round
    to_loop.run_pending()  # the owner, once the thread is done
    assert ran == list(range(8))
    to_loop.close()


async def test_the_loops_timer_takes_what_the_thread_hands_over_until_closed():
    to_loop = ToLoop(asyncio.get_running_loop(), every=0.001)
    ran: list[int] = []
    arrived = asyncio.Event()

    def note(n: int) -> None:
        ran.append(n)
        if n == 2:
            arrived.set()

    await asyncio.to_thread(lambda: [to_loop.call(note, n) for n in range(3)])
    await asyncio.wait_for(arrived.wait(), timeout=60)  # no owner's run_pending needed
    assert ran == [0, 1, 2]
    to_loop.close()
    await asyncio.to_thread(to_loop.call, note, 3)
    await asyncio.sleep(0.01)  # several of the closed timer's intervals: it does not come round
    assert ran == [0, 1, 2]
    to_loop.run_pending()
    assert ran == [0, 1, 2, 3]


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

    to_loop.join(text, "")  # the one wake-up of the loop, spent here
    await asyncio.sleep(0)  # the turn it asked for runs it
    assert ran == [("text", "")]
    await asyncio.to_thread(hand_over)
    to_loop.run_pending()
    # Pieces for one callback joined until another callback came between.
    assert ran == [
        ("text", ""),
        ("text", "Hello,"),
        ("thought", "hm"),
        ("text", " world"),
        ("call", "end"),
        ("text", "!"),
    ]
    to_loop.close()
