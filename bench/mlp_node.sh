# The node bench/vs_triton.sh and bench/cpu_profile.sh measure, written in one place so both
# measure the same one: ferryd with one CPU worker (one intra-op thread, not pinned), one hook
# host with two hook threads, and the example MLP. Sourced, not run.
#   write_mlp_node DIR NAME HTTP GRPC   DIR/models and DIR/node.toml; HTTP and GRPC are
#                                       listen addresses (port 0: any free port)

write_mlp_node() {
  local dir=$1 name=$2 http=$3 grpc=$4
  mkdir -p "$dir/models" && cp -r examples/models/mlp "$dir/models/mlp"
  cat > "$dir/node.toml" <<TOML
[node]
name = "$name"
devices = "cpu:1"
hookhosts = 1
model_repository = "$dir/models"
shm_size = "256MiB"
[node.listen]
http = "$http"
grpc = "$grpc"
metrics = "127.0.0.1:0"
[supervisor]
control_socket = "$dir/control.sock"
[cpu]
threads = 1
pin = false
[hooks]
threads = 2
TOML
}
