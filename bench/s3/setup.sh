#!/usr/bin/env bash
# Installs what bench/s3/run.py needs beyond stoker itself:
#   nginx   the origin server (Debian package; only the binary is used: run.py
#           writes its own config in a temporary folder and never touches
#           /etc/nginx or starts the system service);
#   boto3   the peer, into stoker's virtual environment .venv (usually already
#           there, pulled in by moto for the S3 tests).
#
# Usage: bench/s3/setup.sh          (as root, or with sudo available)
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=$PWD/.venv

if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  echo "installing nginx with apt-get"
  "${sudo[@]}" apt-get update -qq
  # The package's postinst may try to start the system service; we do not
  # want it running (run.py starts its own instance on a free port).
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq nginx
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet nginx 2>/dev/null; then
    "${sudo[@]}" systemctl stop nginx || true
  elif [ -f /run/nginx.pid ]; then
    "${sudo[@]}" /usr/sbin/nginx -s quit 2>/dev/null || true
  fi
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
"$nginx_bin" -v

if [ ! -x "$venv/bin/python" ]; then
  echo "no $venv: build stoker first (make test or make demo)" >&2
  exit 1
fi
if ! "$venv/bin/python" -c "import boto3" 2>/dev/null; then
  echo "installing boto3 into $venv"
  "$venv/bin/python" -m pip install --quiet --progress-bar off boto3
fi
"$venv/bin/python" - <<'PY'
import boto3, botocore
print(f"boto3 {boto3.__version__}, botocore {botocore.__version__}")
try:
    import stoker
    print(f"stoker {getattr(stoker, '__version__', '?')} from {stoker.__file__}")
except ImportError as e:
    print(f"stoker is not importable from this venv yet: {e}")
PY
echo "ready: $venv/bin/python bench/s3/run.py --help"
