"""One cold start in a fresh process (bench/cold_start.py runs it): load a function's source the way the
functions-framework server does (`create_app`), hand it one HTTP request through the app's WSGI interface, and
report, on the last line of stdout, the time since the parent's stamp, the CPU seconds this process has used
(user + sys, every thread, from getrusage) and its peak RSS.

    BENCH_T0=<parent's time.monotonic() just before starting us> python bench/cold_child.py SOURCE TARGET EVENT

EVENT is a JSON [headers, body]. CLOCK_MONOTONIC is shared by every process on Linux, so the times include
process creation and interpreter start. Peak RSS is VmHWM, the high-water mark of this process's own address
space: ru_maxrss would report the parent's peak instead (Linux records the high-water mark of the address
space a process had before exec, here the parent's). Nothing is imported here that functions-framework would
not import.
"""

import json
import os
import resource
import sys
import time


def peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    source, target, event = sys.argv[1:4]
    from functions_framework import create_app

    app = create_app(target, source)
    loaded = time.monotonic()
    headers, body = json.loads(event)
    response = app.test_client().post("/", headers=headers, data=body.encode())
    handled = time.monotonic()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start = float(os.environ["BENCH_T0"])
    result = {
        "status": response.status_code,
        "loaded_s": loaded - start,
        "handled_s": handled - start,
        # What a fractional-vCPU function tier stretches: a sixth of a core makes each CPU second six.
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_kib": peak_rss_kib(),
        "modules": len(sys.modules),
        "vertex_client": any(name.startswith("google.cloud.aiplatform") for name in sys.modules),
    }
    sys.stdout.flush()
    print("BENCH-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
