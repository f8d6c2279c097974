# Sourced, not run (bench/device_session.sh sources it at its top): unpacks .device-carry/torchao.tgz (written by
# bench/torchao_carry.sh) into a fresh /tmp dir and exports TORCHAO_PATH, the dir that holds the torchao/ package.
# bench/llama_torch.py and bench/gpt2_torch.py put it first on sys.path for --float8 tensorwise|rowwise only. It is not
# put on PYTHONPATH: every other python3 of the session (transformers probes for torchao) imports what it did before.
# Does nothing when TORCHAO_PATH is already set or the tarball is absent (then --float8 fails, naming the flag).
_torchao_tgz="$(dirname "${BASH_SOURCE[0]}")/../.device-carry/torchao.tgz"
if [[ -z ${TORCHAO_PATH:-} && -f $_torchao_tgz ]]; then
  TORCHAO_PATH=$(mktemp -d /tmp/torchao_XXXXXX) && tar -xzf "$_torchao_tgz" -C "$TORCHAO_PATH" && export TORCHAO_PATH &&
    echo "torchao: $(cat "$TORCHAO_PATH/TORCHAO_COMMIT") unpacked at $TORCHAO_PATH"
fi
unset _torchao_tgz
