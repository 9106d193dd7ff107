#pragma once

// A thread that should give way: the evaluator, whose periodic evaluations
// share the cores with the workers they measure.

namespace strata {

// Raises the calling thread's nice value by `increment` (Linux schedules
// threads, so only this thread yields): when the cores are busy it gets a
// small share of them, when they are idle it runs at full speed. False
// when the system refused (the priority is then unchanged).
bool LowerThreadPriority(int increment);

}  // namespace strata
