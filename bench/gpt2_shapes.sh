# shellcheck shell=bash
# Sourced by the device scripts (bench/device_session.sh, bench/ab_base.sh): gpt2_shape SIZE prints the --set flags
# that turn configs/gpt2_124m.yaml into GPT-2 SIZE (124m: none; 350m, 774m, 1.5b: the published shapes); another
# SIZE is an error (status 2), never a silent 124M. gpt2_check_sizes SIZE...: status 2 naming the first unknown one,
# for a script to stop on before its first run.
gpt2_shape() {
  case $1 in
    124m) ;;
    350m) echo "--set model.gpt2.n_layer=24 --set model.gpt2.n_head=16 --set model.gpt2.n_embd=1024" ;;
    774m) echo "--set model.gpt2.n_layer=36 --set model.gpt2.n_head=20 --set model.gpt2.n_embd=1280" ;;
    1.5b) echo "--set model.gpt2.n_layer=48 --set model.gpt2.n_head=25 --set model.gpt2.n_embd=1600" ;;
    *) echo "gpt2_shape: unknown GPT-2 size '$1' (124m 350m 774m 1.5b)" >&2; return 2 ;;
  esac
}
gpt2_check_sizes() {
  local s
  for s in "$@"; do gpt2_shape "$s" > /dev/null || return 2; done
}
