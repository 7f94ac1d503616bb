// CPU Fourier transforms (internal): FFTW 3's guru interface over kiln's strided arrays (cpu/fft.cpp).
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {

/// Runs `call` (core/backend.hpp's FftCall) with FFTW (fftw3 for float64, fftw3f for float32), any layout; the
/// plans are made under one lock (FFTW's planner is not thread-safe) and cached. Without FFTW in this build it
/// throws kiln::Error naming the package to install.
bool cpu_fft(const detail::FftCall& call);

}  // namespace kiln::cpu_impl
