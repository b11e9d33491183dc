"""Tensor-parallel styles for tilewright modules (opt-in: importing this module imports ``torch.distributed``,
which ``import tilewright`` does not).

:class:`ColwiseParallel` is torch's ``ColwiseParallel`` that also takes :class:`tilewright.nn.RMSNormLinear`
(torch's accepts ``nn.Linear`` and ``nn.Embedding`` only): the projection's weight and bias are sharded over output
features (Shard(0)) and the norm weight stays replicated - each rank normalises its full copy of the input (the
norm's sum of squares spans K, which is not split) and multiplies by its columns. The input arrives replicated and
the output leaves sharded over its last dimension, as for an ``nn.Linear``; the op then runs on the rank's shards
(ops/_dtensor.tensor_parallel_rms_norm_linear). The gradients of the input and of the norm weight are Partial sums
over the ranks, reduced by DTensor where they are used (the input's by the style's input wrapping, as torch's
column-parallel linear does; the norm weight's when the optimizer or a norm reads it).

    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module
    from tilewright.distributed import ColwiseParallel

    parallelize_module(block, tp_mesh, {"norm_up": ColwiseParallel(), "down": RowwiseParallel()})
"""
from __future__ import annotations

from functools import partial

import torch
from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel as _TorchColwiseParallel

from .nn import RMSNormLinear

__all__ = ["ColwiseParallel"]


class ColwiseParallel(_TorchColwiseParallel):
    """torch's ``ColwiseParallel`` (same arguments), extended to :class:`tilewright.nn.RMSNormLinear`: weight and
    bias Shard(0), norm weight Replicate. Any other module is partitioned exactly as torch's style does."""

    def _apply(self, module: torch.nn.Module, device_mesh) -> torch.nn.Module:
        if not isinstance(module, RMSNormLinear):
            return super()._apply(module, device_mesh)
        return distribute_module(
            module, device_mesh, self._partition_rms_norm_linear_fn,
            partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
            partial(self._prepare_output_fn, self.output_layouts, self.use_local_output))

    def _partition_rms_norm_linear_fn(self, name, module, device_mesh):
        for param_name, param in list(module.named_parameters(recurse=False)):
            placement = Replicate() if param_name == "norm_weight" else Shard(0)
            module.register_parameter(param_name, torch.nn.Parameter(
                distribute_tensor(param, device_mesh, [placement], src_data_rank=self.src_data_rank),
                requires_grad=param.requires_grad))
