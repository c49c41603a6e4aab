#!/usr/bin/env bash
# Makes sure everything the test suite talks to is installed and running:
# PostgreSQL and Redis at 127.0.0.1, Debian's chromium and a Chinese font (portal tests), gettext (the check
# that the translation catalogue matches the sources) and prometheus
# (metering tests), poppler-utils with poppler-data (the PDF tests), and a C compiler with the
# interpreter's headers (make native compiles the admission engine, which CI tests). Idempotent:
# does nothing when all is in place.
set -euo pipefail

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v xgettext >/dev/null 2>&1 || need_apt+=(gettext)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# a Chinese font, so the portal's zh-Hans pages draw in Chromium as readers see them
fc-list :lang=zh 2>/dev/null | grep -q . || need_apt+=(fonts-noto-cjk)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need_apt+=(postgresql)
# pdftoppm, pdftotext and pdffonts: the invoice PDF tests render and read the PDFs
command -v pdftoppm >/dev/null 2>&1 || need_apt+=(poppler-utils)
# poppler's CMaps, so pdftotext and pdffonts read the Chinese PDFs' CID font
[ -d /usr/share/poppler/cMap ] || need_apt+=(poppler-data)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
py_include=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
[ -n "$py_include" ] && [ -f "$py_include/Python.h" ] || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  # Debian starts a prometheus service on install; the tests run their own.
  pkill -x prometheus 2>/dev/null || true
fi

# The tests connect as the role `postgres` over TCP on loopback without a password: trust that
# role there (and only there). Debian's cluster asks for scram on 127.0.0.1 out of the box.
pg_version="$(ls /etc/postgresql | sort -V | tail -1)"
pg_hba="/etc/postgresql/${pg_version}/main/pg_hba.conf"
if ! grep -q '^# tidegate-tests: postgres' "$pg_hba"; then
  echo "trusting 127.0.0.1 and ::1 in $pg_hba for the test role" >&2
  sed -i '/^# tidegate-tests/,+2d' "$pg_hba"  # an earlier version of these lines
  {
    echo "# tidegate-tests: postgres on loopback needs no password (written by .ci/ensure_services.sh)"
    echo "host    all             postgres        127.0.0.1/32            trust"
    echo "host    all             postgres        ::1/128                 trust"
    cat "$pg_hba"
  } >"$pg_hba.new"
  mv "$pg_hba.new" "$pg_hba"
  chown postgres:postgres "$pg_hba"
  if pg_isready -q -h 127.0.0.1 -p 5432; then
    pg_ctlcluster --skip-systemctl-redirect "$pg_version" main reload
  fi
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "starting PostgreSQL $pg_version" >&2
  pg_ctlcluster --skip-systemctl-redirect "$pg_version" main start
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  pg_isready -q -h 127.0.0.1 -p 5432 || {
    echo "PostgreSQL $pg_version did not answer on 127.0.0.1:5432; see /var/log/postgresql/" >&2
    exit 1
  }
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis" >&2
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 1; done
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || {
    echo "Redis did not answer on 127.0.0.1:6379" >&2
    exit 1
  }
fi
