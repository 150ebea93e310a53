"""Invariant mode under ``torch.compile``: the batch-sensitive aten ops become ``canvaslab::`` ops while
Inductor traces, and a compiled graph that still holds a reduction of its own is refused.

Inductor picks a reduction's block plan (and whether to split it) from the whole tensor's size, the
batch included, autotunes matmuls per shape, and fuses norms and softmaxes into reductions of its own:
each can change a row's rounding with the batch. ``invariant_backend`` is Inductor with two changes:

- a decomposition table (applied by AOTAutograd as it traces to aten, before Inductor sees the graph)
  that maps every batch-sensitive aten op (mm, addmm, bmm, softmax, log_softmax, logsumexp, float sum
  and mean, sort, topk) onto the ``canvaslab::`` custom ops (``canvaslab.invariant.custom_ops``), whose
  kernels fix the reduction order by the reduced size; Inductor keeps them as opaque calls. Each row of
  the op table (``canvaslab.invariant.ops.TABLE``) gives its op's decompositions (``DECOMPOSITIONS``);
- a last post-grad pass, ``RefuseBatchVariantReductions``, that fails the compilation if anything in
  the final graph still reduces floating-point values in an order the compiler chooses: an aten
  reduction or matmul, attention, a float scatter-add, an unstable sort, or an op of another library.

Reductions whose result cannot depend on the order (max, min, argmax, any, integer sums) are allowed.
Inductor's own CUDA graphs stay off: the fused step captures the passes itself.
"""

from __future__ import annotations

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from canvaslab.invariant import custom_ops
from canvaslab.invariant.ops import DECOMPOSITIONS  # aten -> canvaslab while tracing: the op table's decompositions


# --- the check on the final graph --------------------------------------------------------------------

# Ops whose floating-point result depends on the order in which they add (or pick among ties).
ORDER_DEPENDENT = frozenset({
    "sum", "mean", "prod", "nansum", "nanmean", "var", "var_mean", "std", "std_mean", "xor_sum",
    "_softmax", "_log_softmax", "softmax", "log_softmax", "logsumexp", "cumsum", "cumprod", "logcumsumexp",
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "matmul", "linear", "_grouped_mm",
    "_scaled_mm", "convolution", "_convolution", "einsum", "tensordot",
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu", "_flash_attention_forward",
    "_efficient_attention_forward", "_scaled_dot_product_attention_math",
    "native_layer_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit_no_training",
    "_fused_rms_norm", "rms_norm", "linalg_vector_norm", "norm", "frobenius_norm",
    "index_add", "scatter_add", "scatter_reduce", "index_reduce", "embedding_bag", "_embedding_bag",
})
TIE_DEPENDENT = frozenset({"sort", "topk", "kthvalue", "median", "mode", "msort", "argsort"})


def _floating(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_floating(v) for v in value)
    return isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())


def _why_order_dependent(node: torch.fx.Node) -> str | None:
    """Why ``node`` may compute a row differently at another batch size, or None."""
    target, value = node.target, node.meta.get("val")
    if isinstance(target, torch._ops.HigherOrderOperator):
        wrapped = node.args[0] if node.args else None
        ours = getattr(wrapped, "namespace", None) == custom_ops.NAMESPACE
        if target.__name__.startswith("auto_functionalized") and ours:  # a canvaslab op that writes in place
            return None
        return f"{target.__name__} (an opaque region whose reduction order is not canvaslab's)"
    if not isinstance(target, torch._ops.OpOverload):
        return None
    namespace, name = target.namespace, target._schema.name.split("::")[-1]
    if namespace == custom_ops.NAMESPACE:
        return None
    if namespace not in ("aten", "prims"):
        return f"{target} (another library's op)" if _floating(value) else None
    if name in TIE_DEPENDENT:
        return None if node.kwargs.get("stable") or (len(node.args) > 1 and node.args[1] is True) else f"{target}"
    if name == "index_put" and _floating(value):
        accumulate = node.kwargs.get("accumulate", node.args[3] if len(node.args) > 3 else False)
        return f"{target} (accumulate)" if accumulate else None
    if name in ORDER_DEPENDENT and _floating(value):
        return str(target)
    return None


def batch_variant_nodes(graph: torch.fx.Graph) -> list[str]:
    """Every op of ``graph`` that reduces floating-point values in an order the compiler chose."""
    found = []
    for node in graph.nodes:
        if node.op == "call_function":
            why = _why_order_dependent(node)
            if why is not None:
                found.append(f"{node.name}: {why}")
    return found


class BatchVariantGraph(RuntimeError):
    """A compiled graph kept a reduction whose order could depend on the batch."""


class RefuseBatchVariantReductions(CustomGraphPass):
    """Inductor's last post-grad pass in invariant mode: the graph Inductor generates code from must hold
    no reduction outside canvaslab's ops."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        found = batch_variant_nodes(graph)
        if found:
            raise BatchVariantGraph("compiled graph keeps reductions outside canvaslab's batch-invariant ops: "
                                    + "; ".join(found[:12]))

    def uuid(self) -> str:
        return "canvaslab-refuse-batch-variant-reductions-1"


def decompositions() -> dict:
    """Inductor's decompositions with canvaslab's mapping on top (it wins where both decompose an op)."""
    from torch._inductor.decomposition import select_decomp_table

    return {**select_decomp_table(), **DECOMPOSITIONS}


def invariant_backend(graph_module: torch.fx.GraphModule, example_inputs):
    """A ``torch.compile`` backend: Inductor, with canvaslab's ops in place of the batch-sensitive ones."""
    from torch._inductor.compile_fx import compile_fx

    # emulate_precision_casts: Inductor's fused elementwise code rounds to the tensor's dtype (bf16) wherever
    # eager code does; by default it keeps float32 in between, and on a real-shapes model that moved router
    # scores enough to change the first pass's logits by up to 3.6 on the H200
    # (benchmarks/results/h200_compiled_s7/NOTES.md at commit cfcbda3).
    patches = {"post_grad_custom_post_pass": RefuseBatchVariantReductions(), "triton.cudagraphs": False,
               "emulate_precision_casts": True}
    return compile_fx(graph_module, example_inputs, decompositions=decompositions(), config_patches=patches)


def traced_backend(graph_module: torch.fx.GraphModule, example_inputs):
    """The same mapping and check, with the traced aten graph run as it is (no Inductor code generation):
    seconds instead of minutes on a CPU, for tests of everything but Inductor's kernels."""
    from torch._dynamo.backends.common import aot_autograd

    def checked(traced: torch.fx.GraphModule, inputs):
        RefuseBatchVariantReductions()(traced.graph)
        return traced.forward

    return aot_autograd(fw_compiler=checked, decompositions=decompositions())(graph_module, example_inputs)


def compile_invariant(fn, backend=None):
    """``torch.compile(fn)`` with ``invariant_backend`` (or ``backend``), one whole graph (a break would run
    eager code outside the check), sizes symbolic from the start (one compilation serves every batch size
    above 1: a batch study would otherwise compile again at its second size)."""
    return torch.compile(fn, backend=backend or invariant_backend, fullgraph=True, dynamic=True)


__all__ = ["DECOMPOSITIONS", "BatchVariantGraph", "RefuseBatchVariantReductions", "batch_variant_nodes",
           "compile_invariant", "decompositions", "invariant_backend", "traced_backend"]
