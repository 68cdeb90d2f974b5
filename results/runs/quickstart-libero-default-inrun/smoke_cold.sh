#!/bin/bash
D=/work/smoke2; rm -rf $D; git clone -q /work/main $D; cd $D
ln -s /work/main/.venv .venv; ln -s /work/main/.venv-libero .venv-libero
C=$(mktemp -d /tmp/jaxcache.XXXX)
git log --oneline -1 | cut -c1-60
uptime
/usr/bin/time -f "%e s wall %U user %S sys" env VLAJAX_COMPILATION_CACHE=$C PYTHONPATH=$D VLAJAX_LIBERO_REQUIRED=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/libero/test_quickstart_libero.py --durations=3 2>&1 | tail -6
uptime
d=$(ls -td /tmp/pytest-of-root/pytest-*/test_quickstart_libero_smoke_w0 | head -1)
python3 -c "import json;print(json.load(open('$d/qsl/report/summary.json'))['meta']['phase_seconds'])"
