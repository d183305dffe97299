#!/usr/bin/env bash
# A Python environment for WhisperLive's server, the peer of bench/bench_server.py
# (--whisperlive-python .venv-whisperlive/bin/python). whisper-live is installed
# without its dependency list (torch with CUDA wheels, openvino, openai-whisper:
# gigabytes its faster_whisper backend does not use on a CPU); what that backend
# imports is installed by name. bench/whisperlive_stub stands in for torch.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-whisperlive"
python3 -m venv "$venv"
"$venv/bin/pip" install -q "faster-whisper==1.2.1" "ctranslate2==4.8.5" "fastapi==0.165.0" \
  "uvicorn==0.55.0" "websockets==17.4" "onnxruntime==1.32.0" "scipy==1.17.1" "numpy==2.4.6"
"$venv/bin/pip" install -q --no-deps "whisper-live==0.10.0"
PYTHONPATH="$root/bench/whisperlive_stub" "$venv/bin/python" -c \
  "from whisper_live.server import TranscriptionServer" && echo "WhisperLive ready: $venv/bin/python"
