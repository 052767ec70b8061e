"""The frames of checkpoints' sockets and pipes (python/kgw_frame.py) and the keeper's part
in them (python/kgw_keeper.py), without a kernel: a message read whole however it arrives
(in pieces, two in one write), refused past the limit before it is read, cut short or not a
JSON object; the keeper's revival against checkpoints of the test's making (an answer in
pieces; the generation limit, where it gives up rather than go to an older checkpoint).
Run by meson (the unit test kgw_frame) with python/ on PYTHONPATH."""
import os
import socket
import struct
import tempfile
import threading
import time
import unittest

import kgw_frame
import kgw_keeper


def trickle(sock, data, cut, pause=0.005):
    """Sends data in pieces of cut bytes, pause apart, from a thread."""
    def run():
        for i in range(0, len(data), cut):
            sock.sendall(data[i:i + cut])
            time.sleep(pause)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


class Frames(unittest.TestCase):
    def setUp(self):
        self.a, self.b = socket.socketpair()
        self.b.settimeout(5)

    def tearDown(self):
        self.a.close()
        self.b.close()

    def test_a_frame_in_pieces_is_read_whole(self):
        msg = {"ok": False, "error": "x" * 3000}
        t = trickle(self.a, kgw_frame.encode(msg), 97)
        self.assertEqual(kgw_frame.recv(self.b, 5), msg)
        t.join()

    def test_two_frames_in_one_write(self):
        self.a.sendall(kgw_frame.encode({"n": 1}) + kgw_frame.encode({"n": 2}))
        self.assertEqual(kgw_frame.recv(self.b), {"n": 1})
        self.assertEqual(kgw_frame.recv(self.b), {"n": 2})

    def test_over_the_limit(self):
        with self.assertRaises(kgw_frame.FrameError):
            kgw_frame.encode({"e": "x" * kgw_frame.MAX_FRAME})
        self.a.sendall(struct.pack(">I", kgw_frame.MAX_FRAME + 1))  # and nothing after it
        with self.assertRaisesRegex(kgw_frame.FrameError, "at most %d" % kgw_frame.MAX_FRAME):
            kgw_frame.recv(self.b, 5)
        # the largest that fits goes through
        big = {"e": "x" * (kgw_frame.MAX_FRAME - len('{"e": ""}'))}
        t = trickle(self.a, kgw_frame.encode(big), 1000)
        self.assertEqual(kgw_frame.recv(self.b, 5), big)
        t.join()

    def test_cut_short_or_not_an_object(self):
        self.a.sendall(struct.pack(">I", 10) + b'{"a"')
        self.a.shutdown(socket.SHUT_WR)
        with self.assertRaisesRegex(kgw_frame.FrameError, "inside a frame"):
            kgw_frame.recv(self.b, 5)
        for body in (b"[1, 2]", b"not json", b"\xff\xfe"):
            a, b = socket.socketpair()
            a.sendall(struct.pack(">I", len(body)) + body)
            with self.assertRaises(kgw_frame.FrameError):
                kgw_frame.recv(b, 5)
            a.close()
            b.close()

    def test_the_end_before_a_frame(self):
        self.a.close()
        with self.assertRaisesRegex(kgw_frame.FrameError, "before a frame"):
            kgw_frame.recv(self.b, 5)

    def test_a_whole_frame_in_time_or_none(self):
        self.a.sendall(struct.pack(">I", 20) + b'{"a": ')  # the rest never comes
        t0 = time.monotonic()
        with self.assertRaises(TimeoutError):
            kgw_frame.recv(self.b, 0.3)
        self.assertLess(time.monotonic() - t0, 2)

    def test_pipes(self):
        r, w = os.pipe()
        try:
            msg = {"ok": True, "pid": 1234, "pad": "y" * 3000}
            t = threading.Thread(target=kgw_frame.send, args=(w, msg))
            t.start()
            self.assertEqual(kgw_frame.recv(r), msg)
            t.join()
            os.close(w)
            w = -1
            with self.assertRaises(kgw_frame.FrameError):
                kgw_frame.recv(r)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)


class FakeCheckpoint:
    """A checkpoint's socket in dir: answers one spawn command with answer, in pieces."""

    def __init__(self, dir, name, answer, cut=5):
        self.asked = []
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ls.bind(os.path.join(dir, name))
        self.ls.listen(1)
        self.ls.settimeout(0.05)
        self.stop = False

        def run():
            while not self.stop:
                try:
                    conn, _ = self.ls.accept()
                    break
                except OSError:  # (a timeout: asked to stop yet?)
                    continue
            else:
                return
            with conn:
                conn.settimeout(5)
                self.asked.append(kgw_frame.recv(conn, 5))
                data = kgw_frame.encode(answer)
                for i in range(0, len(data), cut):
                    conn.sendall(data[i:i + cut])
                    time.sleep(0.002)
        self.t = threading.Thread(target=run, daemon=True)
        self.t.start()

    def close(self):
        self.stop = True
        self.t.join(5)
        self.ls.close()


class Keeper(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kgw-keeper-")
        self.live = os.path.join(self.tmp.name, ".kgw-live")
        with open(self.live, "w") as f:
            f.write("99")
        self.fakes = []

    def tearDown(self):
        for f in self.fakes:
            f.close()
        self.tmp.cleanup()

    def live_pid(self):
        with open(self.live) as f:
            return f.read()

    def fake(self, name, answer):
        self.fakes.append(FakeCheckpoint(self.tmp.name, name, answer))
        time.sleep(0.02)  # (the newest: the latest socket made)
        return self.fakes[-1]

    def test_revives_from_the_newest_answer_read_whole(self):
        older = self.fake(".ckpt-older", {"ok": True, "pid": 1})
        newest = self.fake(".ckpt-newest", {"ok": True, "pid": 4321, "pad": "z" * 2000})
        self.assertTrue(kgw_keeper.revive(self.live))
        self.assertEqual(self.live_pid(), "4321")
        self.assertEqual(newest.asked, [{"op": "spawn", "files": True}])
        self.assertEqual(older.asked, [])

    def test_gives_up_at_the_generation_limit(self):
        older = self.fake(".ckpt-older", {"ok": True, "pid": 1})
        self.fake(".ckpt-newest", {"ok": False, "ename": "GenerationLimitError",
                                   "error": "restart the kernel"})
        self.assertFalse(kgw_keeper.revive(self.live))
        self.assertEqual(self.live_pid(), "99")
        self.assertEqual(older.asked, [])  # not the state the gateway announces

    def test_other_refusals_go_to_the_next(self):
        self.fake(".ckpt-older", {"ok": True, "pid": 7})
        self.fake(".ckpt-newest", {"ok": False, "error": "fork: [Errno 11]"})
        self.assertTrue(kgw_keeper.revive(self.live))
        self.assertEqual(self.live_pid(), "7")


if __name__ == "__main__":
    unittest.main()
