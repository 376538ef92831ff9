"""A device run whose GPU side was not recorded is no CPU run (twelfth field
gathering (A): a ResNet-18 on CUDA recorded without CUDA activity read "CPU
only"): the host side shows the device (ops only a GPU backend runs,
``[memory]`` events of a device, a backward on a thread of its own), every
format says the GPU side is missing, and no rule judges the rank as a CPU run."""
from kineto import TraceBuilder
from hta_report.api import analyze
from hta_report.render import jsonreport, markdown, terminal, view


def _check(result, rule_id):
    return next(c for c in result.checks if c.id == rule_id)


def _forward(b: TraceBuilder, t0: float, conv: str, bn: str, tid: int = 1) -> None:
    """One forward of 4 conv + BN layers, 100 µs per op on thread ``tid``."""
    for k in range(4):
        b.cpu_op(conv, t0 + 200 * k, 100, tid=tid)
        b.cpu_op(bn, t0 + 200 * k + 100, 100, tid=tid)


def test_cudnn_ops_and_cuda_memory_show_an_unrecorded_device(tmp_path):
    """8 cuDNN convolutions and 8 cuDNN batch norms, 3 of 4 memory events on
    cuda:0, no runtime call, no GPU record, no deviceProperties."""
    b = TraceBuilder(rank=0, gpu_name=None)
    for s in range(2):
        b.step(s + 1, s * 1000, 1000)
        _forward(b, s * 1000 + 50, "aten::cudnn_convolution", "aten::cudnn_batch_norm")
    for k, (dtype, did) in enumerate([(1, 0), (1, 0), (1, 0), (0, -1)]):
        b.memory(10 + k, allocated=1 << 20, reserved=2 << 20, device_type=dtype, device_id=did)
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path, include_last_step=True)
    r = result.ranks[0]
    i = r.integrity
    assert not r.has_gpu and i.launches == 0
    assert i.device_unrecorded == ("ops only a GPU backend runs: aten::cudnn_batch_norm ×8, aten::cudnn_convolution "
                                   "×8; 3 of 4 memory events on cuda:0")
    assert i.idle_unreliable and i.records_lost
    # no rule judges it as a CPU run; the window rule says why
    for rule_id in ("tiny-batches", "slow-cpu-kernels", "gpu-unused", "host-bound"):
        assert _check(result, rule_id).status == "not checked"
        assert "the model ran on a device whose GPU side was not recorded" in _check(result, rule_id).detail
    (f,) = result.findings
    assert f.id == "trace-window" and f.title.startswith("The trace lost its GPU side: the model ran on a device")
    assert "ProfilerActivity.CUDA" in f.fix
    # every format: not "CPU only", the note beside the figures
    assert view.devices(result) == "GPU not recorded in the traces"
    (note,) = view.integrity_notes(result)
    assert note.startswith("rank 0: the GPU side was not recorded: the model ran on a device (ops only")
    md = markdown.render(result, {})
    assert "CPU only" not in md and "The GPU side of the traces is missing" in md
    text = "\n".join(view.headline(result).terminal())
    assert "CPU only" not in text and "GPU side missing: rank 0: the GPU side was not recorded" in text
    assert "the GPU side was not recorded" in jsonreport.render(result, {})


def test_a_backward_on_its_own_thread_shows_a_device(tmp_path):
    """The forward on thread 1, the autograd engine's ops on thread 2 and
    nothing else there: a device's backward (its worker thread). The same
    ops with the backward on the calling thread are a CPU run, whose first
    1.51 ms ``aten::item`` (151x the later ones) is a cold call; on the device
    run it is a wait for the device, no cold call."""
    def build(backward_tid: int):
        b = TraceBuilder(rank=0, gpu_name=None)
        for s in range(3):  # no ProfilerStep: the whole trace is the window
            t0 = s * 3500
            _forward(b, t0 + 50, "aten::convolution", "aten::native_batch_norm")
            # a read of the loss: the first waits 1.5 ms (a device's queue), the others 10 µs
            b.cpu_op("aten::item", t0 + 1900, 1510 if s == 0 else 10)
            for k in range(5):
                b.cpu_op("autograd::engine::evaluate_function: ConvolutionBackward0", t0 + 900 + 200 * k, 150,
                         tid=backward_tid)
                b.cpu_op("aten::convolution_backward", t0 + 910 + 200 * k, 100, tid=backward_tid)
        return b

    build(2).write(tmp_path / "t.json")
    result = analyze(tmp_path, include_last_step=True)
    i = result.ranks[0].integrity
    assert i.device_unrecorded == ("the backward's 15 autograd engine ops run on a thread of their own, apart from "
                                   "the forward's, where PyTorch runs a CPU backward on the calling thread and a "
                                   "device's on the device's thread")
    # the host's op times hold the device's waits: no cold CPU call is read from them
    (window,) = [f for f in result.findings if f.id == "trace-window"]
    assert not any("one-off warm-up" in e for e in window.evidence)
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    build(1).write(cpu / "t.json")
    result = analyze(cpu, include_last_step=True)
    assert result.ranks[0].integrity.device_unrecorded == ""
    (window,) = [f for f in result.findings if f.id == "trace-window"]
    assert any("one-off warm-up" in e and "aten::item" in e for e in window.evidence)
    assert not result.ranks[0].integrity.idle_unreliable
    assert view.devices(result) == "CPU only"


def test_cpu_kernels_and_cpu_memory_are_a_cpu_run(tmp_path):
    """Names close to the GPU-only ones that the CPU runs (SDPA's CPU flash
    kernel, cuDNN's acceptability check) and memory events on the CPU alone."""
    b = TraceBuilder(rank=0, gpu_name=None)
    for s in range(2):
        b.step(s + 1, s * 1000, 1000)
        _forward(b, s * 1000 + 50, "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::cudnn_is_acceptable")
    b.memory(10, allocated=1 << 20, reserved=2 << 20, device_type=0, device_id=-1)
    b.write(tmp_path / "t.json")
    result = analyze(tmp_path)
    assert result.ranks[0].integrity.device_unrecorded == ""
    assert view.devices(result) == "CPU only"
    assert "GPU side" not in _check(result, "slow-cpu-kernels").detail
    assert _check(result, "slow-cpu-kernels").status != "not checked"
