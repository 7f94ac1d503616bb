// Umbrella header: everything a user of kiln needs.
#pragma once

#include "kiln/array.hpp"
#include "kiln/bench.hpp"
#include "kiln/debug.hpp"
#include "kiln/device.hpp"
#include "kiln/dtype.hpp"
#include "kiln/error.hpp"
#include "kiln/fuse.hpp"
#include "kiln/io.hpp"
#include "kiln/kernels.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"
#include "kiln/raw_module.hpp"
#include "kiln/scalar.hpp"
#include "kiln/shape.hpp"
#include "kiln/stream.hpp"
#include "kiln/version.hpp"
