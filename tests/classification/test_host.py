"""The machine a figure was measured on, in words."""

from classification.engine import host


def test_the_machine_is_the_cpu_model_and_the_cpus_this_process_may_use(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC   7B13 64-Core Processor\nflags\t: avx2\n")
    assert host._cpu_model(info) == "AMD EPYC 7B13 64-Core Processor"
    assert host._cpu_model(tmp_path / "absent") != ""  # not Linux: platform's words, never an error
    monkeypatch.setattr(host, "_cpu_model", lambda: "Some CPU")
    text = host.machine_text()
    assert text.startswith("Some CPU, ") and text.endswith(" CPUs") or text == "Some CPU, 1 CPU"
