// Plain types shared by host code and device code of the communication layer.
#pragma once

namespace xstage::comm {

struct WaitBudget {
  unsigned long long timeout_ns;  // from comm::wait_timeout_ns() on the host
  int rank;                       // reported in the timeout message
};

}  // namespace xstage::comm
