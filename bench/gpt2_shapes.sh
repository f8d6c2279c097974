# Sourced by the device scripts (bench/device_session.sh, bench/ab_base.sh): gpt2_shape SIZE prints the --set flags
# that turn configs/gpt2_124m.yaml into GPT-2 SIZE (124m: none; 350m, 774m, 1.5b: the published shapes).
gpt2_shape() {
  case $1 in
    350m) echo "--set model.gpt2.n_layer=24 --set model.gpt2.n_head=16 --set model.gpt2.n_embd=1024" ;;
    774m) echo "--set model.gpt2.n_layer=36 --set model.gpt2.n_head=20 --set model.gpt2.n_embd=1280" ;;
    1.5b) echo "--set model.gpt2.n_layer=48 --set model.gpt2.n_head=25 --set model.gpt2.n_embd=1600" ;;
  esac
}
