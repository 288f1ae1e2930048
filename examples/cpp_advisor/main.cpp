// Asks the Burst-Gap model and advisor about one burst profile, as a scheduler would.
//   cpp_advisor <params.json> [bytes per SM] [SMs] [gap ns] [bursts]
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "xstage/burstgap/burstgap.hpp"

namespace bg = xstage::burstgap;

int main(int argc, char** argv) {
  try {
    if (argc < 2 || argc > 6) throw std::runtime_error("usage: cpp_advisor <params.json> [bytes] [sms] [gap_ns] [bursts]");
    const bg::Params params = bg::read_params(argv[1]);
    bg::BurstProfile profile;  // the fused kernels' exchange: peer stores of 16 B
    profile.bytes_per_burst = argc > 2 ? std::stoul(argv[2]) : 65536;
    profile.sms = argc > 3 ? std::stoi(argv[3]) : 132;
    profile.compute_ns_between_bursts = argc > 4 ? std::stod(argv[4]) : 2000;
    profile.bursts = argc > 5 ? std::stoi(argv[5]) : 16;

    const bg::ModelParams& model = params.find(profile.pattern, profile.store);
    const bg::Prediction pr = bg::predict(model, profile.sms, double(profile.bytes_per_burst),
                                          profile.compute_ns_between_bursts, profile.bursts);
    const bg::Advice advice = bg::advise(params, profile);
    std::printf("prediction: free issue %.0f ns, steady issue %.0f ns, clean bursts %d, min gap %.0f ns\n",
                pr.free_issue_ns, pr.steady_issue_ns, pr.clean_bursts, pr.min_gap_ns);
    std::printf("advice: %s (stall %.0f ns over %d bursts): %s\n", bg::to_string(advice.remedy),
                advice.predicted_stall_ns, profile.bursts, advice.reason.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::string what = e.what();  // one line, whatever the library put in it
    for (char& c : what) c = c == '\n' ? ' ' : c;
    std::fprintf(stderr, "cpp_advisor: %s\n", what.c_str());
    return 1;
  }
}
