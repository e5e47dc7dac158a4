// The CUDA card an emulated device predicts (device: emulated): the card table's facts
// (reports/results/cards.h, CardFacts: memory as CUDA reports it, context, compute capability,
// SMs), as the point carries them to the worker. The runner fills them from the config's `gpu:`.
#pragma once

#include "reports/results/cards.h"

namespace sweep {

using EmulatedCard = CardFacts;

}  // namespace sweep
