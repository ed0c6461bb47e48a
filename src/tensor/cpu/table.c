/* src/tensor/cpu/table.c - the CPU backend's op table: the reference functions themselves. */
#include "tensor/ops.h"

const struct tbi_ops tbi_ops_cpu = {
    .name = "cpu",
    .matmul_fwd = tbi_matmul_fwd,
    .matmul_bwd = tbi_matmul_bwd,
    .layernorm_fwd = tbi_layernorm_fwd,
    .layernorm_bwd = tbi_layernorm_bwd,
    .gelu_fwd = tbi_gelu_fwd,
    .gelu_bwd = tbi_gelu_bwd,
    .add_fwd = tbi_add_fwd,
    .attention_fwd = tbi_attention_fwd,
    .attention_bwd = tbi_attention_bwd,
    .xent_fwd = tbi_xent_fwd,
    .xent_bwd = tbi_xent_bwd,
    .patchify = tbi_patchify,
    .adamw = tbi_adamw,
    .sum_squares = tbi_sum_squares,
};
