"""Which of the zygote's pages does a Python fork copy, and why? (Issue 21's
idle PSS and a burst's page faults are these copies.) Starts a server with
no warm pool (every fork is a cold start's, as in a burst), deploys N hello
functions, calls each once, C at a time, and then compares each live fork's
pages with the zygote's, as root, through /proc/PID/pagemap and
/proc/PID/mem:

- a page present in both at different frames is a copy (copy-on-write);
  one the fork has and the zygote has not is new;
- in a copy, the 8-byte words that differ say what wrote it: a small
  change at an object's start is a reference count (the object's type is
  read from the next word, `ob_type`); another change is attributed to the
  nearest object header below it (type and offset); a copy in which no
  word differs was written and set back (a count raised and lowered).

Prints, per fork (means over the sampled forks): copies and new pages by
mapping, copies by how many words changed, and the commonest reasons.

    sudo python3 bench/cowpages.py --sless "$CARGO_TARGET_DIR/release/sless"
"""

import argparse
import collections
import os
import struct
import tempfile
import time

import coldburst

PAGE = 4096


def maps(pid):
    """(start, end, name) of each mapping of `pid`."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi, parts[5].strip() if len(parts) > 5 else "[anon]"))
    return out


def frames(pagemap, lo, hi):
    """The frame of each page in [lo, hi), None where none is present."""
    pagemap.seek(lo // PAGE * 8)
    data = pagemap.read((hi - lo) // PAGE * 8)
    return [e & ((1 << 55) - 1) if e >> 63 else None for (e,) in struct.iter_unpack("<Q", data)]


class Memory:
    """Another process's memory, read through /proc/PID/mem."""

    def __init__(self, pid):
        self.file = open(f"/proc/{pid}/mem", "rb", buffering=0)
        self.type_names = {}

    def read(self, address, size):
        if not 0 < address < 1 << 47:
            return None
        try:
            self.file.seek(address)
            return self.file.read(size)
        except OSError:
            return None

    def type_name(self, address):
        """`tp_name` of the type object at `address`, or None if it is not one."""
        if address not in self.type_names:
            name = None
            raw = self.read(address + 24, 8)  # after ob_refcnt, ob_type, ob_size
            text = self.read(struct.unpack("<Q", raw)[0], 64) if raw and len(raw) == 8 else None
            if text and b"\0" in text:
                text = text.split(b"\0")[0]
                if text and all(32 < c < 127 for c in text):
                    name = text.decode()
            self.type_names[address] = name
        return self.type_names[address]

    def owner(self, address):
        """What the word at `address` belongs to: the nearest object header
        below it (within 2 KiB) by type; for a code object, which part (in
        CPython 3.11, offset 48 holds co_flags and co_warmup, the calls
        before the code is quickened; from 200 on its bytecode, with the
        specialising interpreter's counters)."""
        low = address - 2048
        window = self.read(low, 2048 + 8)
        if not window:
            return "an unknown object"
        for at in range(2048 - 8, -1, -8):
            count, kind = struct.unpack_from("<QQ", window, at)
            if 0 < count < 1 << 32 and 1 << 20 < kind < 1 << 47:
                name = self.type_name(kind)
                if name == "code":
                    offset = 2048 - at
                    return {48: "code (co_warmup)"}.get(offset, "code (bytecode)" if offset >= 200 else "code")
                if name:
                    return name
        return "an unknown object"


def why(zygote, fork, address):
    """How many words of the page at `address` differ, and what changed them."""
    before, after = zygote.read(address, PAGE), fork.read(address, PAGE)
    if not before or not after:
        return 0, set()
    words, reasons = 0, set()
    for offset in range(0, PAGE - 8, 8):
        (old,), (new,) = struct.unpack_from("<Q", before, offset), struct.unpack_from("<Q", after, offset)
        if old == new:
            continue
        words += 1
        name = None
        if abs(new - old) < 4096 and old < 1 << 32:
            name = zygote.type_name(struct.unpack_from("<Q", before, offset + 8)[0])
        reasons.add(f"refcount of {name}" if name else f"in {zygote.owner(address + offset)}")
    return words, reasons or {"written and set back"}


def compare(zygote_pid, fork_pid, stats):
    zygote, fork = Memory(zygote_pid), Memory(fork_pid)
    with open(f"/proc/{zygote_pid}/pagemap", "rb", buffering=0) as zmap, \
            open(f"/proc/{fork_pid}/pagemap", "rb", buffering=0) as fmap:
        for lo, hi, name in maps(fork_pid):
            for i, (theirs, ours) in enumerate(zip(frames(zmap, lo, hi), frames(fmap, lo, hi))):
                if ours is None or theirs == ours:
                    continue
                if theirs is None:
                    stats["new"][name] += 1
                    continue
                stats["copied"][name] += 1
                words, reasons = why(zygote, fork, lo + i * PAGE)
                bucket = next(b for b in (0, 2, 8, 32, 128, PAGE) if words <= b)
                stats["words"][(name, bucket)] += 1
                for reason in reasons:
                    stats["reason"][(name, reason)] += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sless", required=True)
    ap.add_argument("--functions", type=int, default=32)
    ap.add_argument("--callers", type=int, default=16)
    ap.add_argument("--sample", type=int, default=8, help="forks compared with the zygote")
    ap.add_argument("--top", type=int, default=30, help="reasons shown")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sless-cowpages-")
    os.chmod(work, 0o711)
    # No warm pool: each fork is made for a waiting call, as in a burst; and
    # the instances stay up to be read.
    env = {"SLESS_WARM_INSTANCES": "0", "SLESS_IDLE_TIMEOUT_SEC": "600"}
    server, address = coldburst.start_server(args.sless, f"{work}/data", env)
    try:
        names = [f"f-{i}" for i in range(args.functions)]
        coldburst.deploy_all(address, "cow", "python", names)
        coldburst.burst(address, "cow", names, args.callers)
        time.sleep(1)
        zygote = coldburst.zygote_of(server.pid)
        forks = coldburst.children(zygote)
        print(coldburst.fork_line(coldburst.fork_costs(server.pid)))
        stats = collections.defaultdict(collections.Counter)
        sampled = forks[: args.sample]
        for pid in sampled:
            compare(zygote, pid, stats)
        n = len(sampled)
        print(f"{n} forks compared with the zygote; pages per fork:")
        for key, title in (("copied", "copied"), ("new", "new (not in the zygote)")):
            print(f"  {title}: {sum(stats[key].values()) / n:.0f}: "
                  + ", ".join(f"{name} {c / n:.0f}" for name, c in stats[key].most_common(6)))
        print("copies by words changed:")
        for (name, bucket), c in sorted(stats["words"].items()):
            print(f"  {c / n:7.1f}  {name:32.32} <= {bucket}")
        print(f"copies by reason (a page counts once for each of its reasons), top {args.top}:")
        for (name, reason), c in stats["reason"].most_common(args.top):
            print(f"  {c / n:7.1f}  {name:32.32} {reason}")
    finally:
        coldburst.stop_server(server, work)


if __name__ == "__main__":
    main()
