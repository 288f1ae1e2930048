// Where a timed-out device wait reports before it traps (hopper/mbarrier.cuh).
//
// The report lives in host-mapped pinned memory, so the host can still read it
// after the trap has killed the CUDA context. Kernels write it with plain
// volatile stores: no printf, because a function call anywhere in a kernel makes
// ptxas serialise all of its wgmma instructions (warning C7510).
#pragma once

#include <cstdint>
#include <string>

namespace xstage::hopper {

struct WaitTimeoutReport {
  int flag;            // 1 once a wait timed out (2 while being written; a trap can end the
                       // kernel before the store of 1 lands: the host takes 2 as a report too)
  int block, thread;   // who waited
  int site;            // the kernel's code for the barrier (e.g. attention's WaitSite)
  int stage;           // pipeline stage, -1 if none
  uint32_t parity;     // the phase parity it waited for
  uint32_t smem;       // shared-memory address of the barrier
};

// Process-wide report slot (device-visible pointer), created on first use.
WaitTimeoutReport* timeout_report_device();

// A one-line description of a reported timeout ("" if none), naming the site
// through site_name when given; clears the slot.
std::string take_timeout_report(const char* (*site_name)(int site) = nullptr);

// The same with the whole line written by `describe` (for waits that are not on
// an mbarrier, whose fields the kernel fills with its own meaning); clears the slot.
std::string take_timeout_report(std::string (*describe)(const WaitTimeoutReport& r));

}  // namespace xstage::hopper
