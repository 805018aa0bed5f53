// Fault injection for tests: named points where the engine allocates memory for a request, at
// which a test makes the allocation fail (std::bad_alloc) to prove that running out of memory ends
// the requests it touches with a clear error and leaves the server running. Real exhaustion throws
// the same exception from the same code (operator new, HugePageArena), so the tests exercise the
// recovery that production would take. Unarmed, a point costs one relaxed atomic load.
#pragma once

namespace dspark {

enum class FaultPoint {
  kAdmission,        // BatchEngine admits a queued request into a slot
  kPass,             // BatchEngine runs one step (drafting, the target pass, verification)
  kPromptCacheSave,  // PromptStore copies a slot's rows into host memory
  kCount,
};

// The next `times` hits of `point` throw std::bad_alloc.
void ArmFault(FaultPoint point, int times = 1);
void DisarmFaults();
// Hits of `point` while any point was armed, since the last DisarmFaults().
int FaultHits(FaultPoint point);

// Throws std::bad_alloc when `point` is armed.
void MaybeInjectAllocationFailure(FaultPoint point);

}  // namespace dspark
