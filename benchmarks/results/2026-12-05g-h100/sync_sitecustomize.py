# Diagnostic (not part of shardlab): every CUDA host sync of the process, by Python stack, counted; written at exit.
# Also explicit Stream/Event synchronize calls (the sync debug mode may not see event waits).
import atexit, collections, os, traceback, warnings
if os.environ.get("SYNC_OUT"):
    import torch
    torch.cuda.set_sync_debug_mode(1)
    seen = collections.Counter()
    _show = warnings.showwarning
    def show(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message):
            return _show(message, category, filename, lineno, file, line)
        stack = [f for f in traceback.format_stack()[:-2] if "warnings.py" not in f]
        seen[str(message).splitlines()[0][:120] + "\n" + "".join(stack[-14:])] += 1
    warnings.showwarning = show
    warnings.simplefilter("always")
    def wrap(cls, label):
        orig = cls.synchronize
        def sync(self, *a, **k):
            stack = traceback.format_stack()[:-1]
            seen[label + "\n" + "".join(stack[-10:])] += 1
            return orig(self, *a, **k)
        cls.synchronize = sync
    wrap(torch.cuda.Event, "Event.synchronize")
    wrap(torch.cuda.Stream, "Stream.synchronize")
    def dump():
        if seen:
            with open(os.path.join(os.environ["SYNC_OUT"], f"sync-{os.getpid()}.txt"), "w") as f:
                for k, n in seen.most_common():
                    f.write(f"==== {n} times: {k}\n")
    atexit.register(dump)
