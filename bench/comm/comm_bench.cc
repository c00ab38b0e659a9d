// p2p latency and bandwidth of the transports, printed side by side:
//   threads (two ranks in this process) | mpi, vader single-copy default (CMA) | mpi, single-copy
//   none; each MPI column at the default poll back-off (100 us) and at 20 us, and plain blocking
//   MPI (MPI_Send/MPI_Recv/MPI_Wait, which spin) as the reference.
// Run it plainly: it measures threads itself, then starts `mpirun -np 2` on itself for each MPI
// column (child mode prints one JSON-ish line that the parent parses).
//
// latency: half the median round trip of an 8-byte ping-pong; late msg latency: median time from
// send to receive done when the receiver has already been waiting 2 ms (the executor's case: its
// poll has backed off to sleeping); bandwidth: rank 0 posts K
// messages of S bytes back to back, rank 1 receives them and answers with 8 bytes; S*K / time.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/transport.h"
#include "tightpipe/transport_mpi.h"

#ifdef TIGHTPIPE_HAVE_MPI
#include <mpi.h>
#endif

using namespace tightpipe;

namespace {

constexpr double kTimeout = 60;
const size_t kSizes[] = {8, 64 << 10, 1 << 20, 16 << 20};

struct Numbers {
  double latency_us = 0;
  double late_latency_us = 0;  // send time -> receive done, receiver already waiting 2 ms
  std::map<size_t, double> gbytes_per_s;  // message size -> GB/s
};

Status measure(Transport& t, Numbers& out) {
  if (t.rank() > 1) return OkStatus();
  const int peer = 1 - t.rank();
  std::vector<std::byte> small(8);
  // Latency.
  std::vector<double> rtts;
  for (int i = 0; i < 3000; ++i) {
    const double start = now_seconds();
    if (t.rank() == 0) {
      TP_RETURN_IF_ERROR(send(t, peer, 0, small, kTimeout));
      TP_RETURN_IF_ERROR(recv(t, peer, 0, small, kTimeout));
    } else {
      TP_RETURN_IF_ERROR(recv(t, peer, 0, small, kTimeout));
      TP_RETURN_IF_ERROR(send(t, peer, 0, small, kTimeout));
    }
    if (i >= 100) rtts.push_back(now_seconds() - start);
  }
  std::nth_element(rtts.begin(), rtts.begin() + rtts.size() / 2, rtts.end());
  out.latency_us = rtts[rtts.size() / 2] / 2 * 1e6;
  // Late message: the receiver has waited 2 ms (its poll has backed off to sleeping), the sender
  // stamps the send time (one monotonic clock per machine, also across processes).
  std::vector<double> lates;
  for (int i = 0; i < 200; ++i) {
    TP_RETURN_IF_ERROR(barrier(t, kTimeout));
    double stamp = 0;
    auto bytes = std::as_writable_bytes(std::span<double>(&stamp, 1));
    if (t.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      stamp = now_seconds();
      TP_RETURN_IF_ERROR(send(t, peer, 3, bytes, kTimeout));
    } else {
      TP_RETURN_IF_ERROR(recv(t, peer, 3, bytes, kTimeout));
      lates.push_back(now_seconds() - stamp);
    }
  }
  if (t.rank() == 1) {
    std::nth_element(lates.begin(), lates.begin() + lates.size() / 2, lates.end());
    const double late = lates[lates.size() / 2] * 1e6;
    TP_RETURN_IF_ERROR(send(t, 0, 4, std::as_bytes(std::span<const double>(&late, 1)), kTimeout));
  } else {
    TP_RETURN_IF_ERROR(recv(
        t, 1, 4, std::as_writable_bytes(std::span<double>(&out.late_latency_us, 1)), kTimeout));
  }
  // Bandwidth.
  for (size_t s : kSizes) {
    const int k = static_cast<int>(std::clamp<size_t>((256u << 20) / s, 4, 2000));
    std::vector<std::vector<std::byte>> bufs(4, std::vector<std::byte>(s, std::byte{1}));
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      TP_RETURN_IF_ERROR(barrier(t, kTimeout));
      const double start = now_seconds();
      std::vector<std::unique_ptr<Request>> reqs;
      for (int i = 0; i < k; ++i) {
        reqs.push_back(t.rank() == 0 ? t.isend(peer, 1, bufs[i % 4])
                                     : t.irecv(peer, 1, bufs[i % 4]));
        if (reqs.size() == 4) {  // at most 4 in flight (buffers are reused)
          TP_RETURN_IF_ERROR(reqs.front()->wait(kTimeout));
          reqs.erase(reqs.begin());
        }
      }
      for (auto& r : reqs) TP_RETURN_IF_ERROR(r->wait(kTimeout));
      if (t.rank() == 0) {
        TP_RETURN_IF_ERROR(recv(t, peer, 2, small, kTimeout));
      } else {
        TP_RETURN_IF_ERROR(send(t, peer, 2, small, kTimeout));
      }
      best = std::min(best, now_seconds() - start);
    }
    out.gbytes_per_s[s] = static_cast<double>(s) * k / best / 1e9;
  }
  return OkStatus();
}

std::string encode(const Numbers& n) {
  std::string s = fmt::format("RESULT {:.3f} {:.3f}", n.latency_us, n.late_latency_us);
  for (size_t sz : kSizes) s += fmt::format(" {:.4f}", n.gbytes_per_s.at(sz));
  return s;
}

std::optional<Numbers> decode(const std::string& text) {
  const size_t at = text.find("RESULT ");
  if (at == std::string::npos) return std::nullopt;
  std::vector<std::string> parts =
      split(trim(text.substr(at + 7, text.find('\n', at) - at - 7)), ' ');
  if (parts.size() != 2 + std::size(kSizes)) return std::nullopt;
  Numbers n;
  n.latency_us = std::atof(parts[0].c_str());
  n.late_latency_us = std::atof(parts[1].c_str());
  for (size_t i = 0; i < std::size(kSizes); ++i) {
    n.gbytes_per_s[kSizes[i]] = std::atof(parts[2 + i].c_str());
  }
  return n;
}

int child(double poll_us) {
  auto scope = MpiScope::acquire();
  if (!scope.ok()) return std::fprintf(stderr, "%s\n", scope.status().to_string().c_str()), 1;
  MpiOptions o;
  o.max_poll_interval_us = poll_us;
  auto t = make_mpi_transport(*scope, o);
  if (!t.ok()) return std::fprintf(stderr, "%s\n", t.status().to_string().c_str()), 1;
  Numbers n;
  Status s = measure(**t, n);
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
  if ((*t)->rank() == 0) std::printf("%s\n", encode(n).c_str());
  return 0;
}

#ifdef TIGHTPIPE_HAVE_MPI
// Reference: plain blocking MPI (MPI_Send/MPI_Recv/MPI_Wait spin), the same traffic pattern.
int child_raw() {
  auto scope = MpiScope::acquire();
  if (!scope.ok()) return 1;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  const int peer = 1 - r;
  char small[8] = {};
  std::vector<double> rtts;
  for (int i = 0; i < 3000; ++i) {
    const double start = now_seconds();
    if (r == 0) {
      MPI_Send(small, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
      MPI_Recv(small, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(small, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(small, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
    }
    if (i >= 100) rtts.push_back(now_seconds() - start);
  }
  std::nth_element(rtts.begin(), rtts.begin() + rtts.size() / 2, rtts.end());
  Numbers out;
  out.latency_us = rtts[rtts.size() / 2] / 2 * 1e6;
  std::vector<double> lates;
  for (int i = 0; i < 200; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double stamp = 0;
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      stamp = now_seconds();
      MPI_Send(&stamp, 1, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD);
    } else {
      MPI_Recv(&stamp, 1, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      lates.push_back(now_seconds() - stamp);
    }
  }
  if (r == 1) {
    std::nth_element(lates.begin(), lates.begin() + lates.size() / 2, lates.end());
    double late = lates[lates.size() / 2] * 1e6;
    MPI_Send(&late, 1, MPI_DOUBLE, 0, 4, MPI_COMM_WORLD);
  } else {
    MPI_Recv(&out.late_latency_us, 1, MPI_DOUBLE, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  for (size_t s : kSizes) {
    const int k = static_cast<int>(std::clamp<size_t>((256u << 20) / s, 4, 2000));
    std::vector<std::vector<std::byte>> bufs(4, std::vector<std::byte>(s, std::byte{1}));
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = now_seconds();
      std::vector<MPI_Request> reqs;
      for (int i = 0; i < k; ++i) {
        MPI_Request q;
        if (r == 0) {
          MPI_Isend(bufs[i % 4].data(), static_cast<int>(s), MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q);
        } else {
          MPI_Irecv(bufs[i % 4].data(), static_cast<int>(s), MPI_BYTE, peer, 1, MPI_COMM_WORLD, &q);
        }
        reqs.push_back(q);
        if (reqs.size() == 4) {
          MPI_Wait(&reqs.front(), MPI_STATUS_IGNORE);
          reqs.erase(reqs.begin());
        }
      }
      MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
      if (r == 0) {
        MPI_Recv(small, 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Send(small, 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      }
      best = std::min(best, now_seconds() - start);
    }
    out.gbytes_per_s[s] = static_cast<double>(s) * k / best / 1e9;
  }
  if (r == 0) std::printf("%s\n", encode(out).c_str());
  return 0;
}
#endif

std::optional<Numbers> run_mpi(const char* self, const std::string& mca, double poll_us) {
  const std::string mode = poll_us > 0 ? fmt::format("--child {}", poll_us) : "--child-raw";
  const std::string cmd = fmt::format("{} --allow-run-as-root --oversubscribe {} -np 2 {} {} 2>&1",
                                      TP_MPIEXEC, mca, self, mode);
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return std::nullopt;
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  pclose(f);
  auto n = decode(text);
  if (!n) std::fprintf(stderr, "comm_bench: `%s` gave:\n%s\n", cmd.c_str(), text.c_str());
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--child") == 0) return child(std::atof(argv[2]));
#ifdef TIGHTPIPE_HAVE_MPI
  if (argc >= 2 && std::strcmp(argv[1], "--child-raw") == 0) return child_raw();
#endif
  // --child and --child-raw above are the modes mpirun starts this binary in; users pass none.
  bench::Flags flags(
      "p2p latency and bandwidth between 2 ranks, side by side: threads, then MPI (mpirun -np 2 "
      "on this binary) with vader single-copy on and off at several poll back-offs, and plain "
      "blocking MPI for reference. Takes no flags.",
      "comm_bench");
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;

  std::vector<std::pair<std::string, Numbers>> cols;
  {
    auto ts = make_inproc_transports(2);
    std::vector<Numbers> n(2);
    auto st = run_on_threads(ts, [&](Transport& t) { return measure(t, n[t.rank()]); });
    for (auto& s : st) {
      if (!s.ok()) return std::fprintf(stderr, "threads: %s\n", s.to_string().c_str()), 1;
    }
    cols.push_back({"threads", n[0]});
  }
#ifdef TIGHTPIPE_HAVE_MPI
  for (double poll : {100.0, 20.0, 0.0}) {  // 0: plain blocking MPI, the spinning reference
    for (const char* mode : {"cma", "none"}) {
      const std::string mca =
          std::string(mode) == "none" ? "--mca btl_vader_single_copy_mechanism none" : "";
      auto n = run_mpi(argv[0], mca, poll);
      if (!n) return 1;
      cols.push_back(
          {poll > 0 ? fmt::format("mpi {} poll{}", mode, poll) : fmt::format("MPI_Wait {}", mode),
           *n});
    }
  }
#endif
  std::printf(
      "p2p between 2 ranks on this machine (%d cores); mpi 'cma' = vader single-copy default, "
      "'none' = --mca btl_vader_single_copy_mechanism none; pollN = max back-off sleep us; "
      "MPI_Wait = plain blocking MPI (spins), for reference\n",
      static_cast<int>(std::thread::hardware_concurrency()));
  std::printf("%-22s", "");
  for (auto& [name, n] : cols) std::printf("%18s", name.c_str());
  std::printf("\n%-22s", "latency (us, 8 B)");
  for (auto& [name, n] : cols) std::printf("%18.2f", n.latency_us);
  std::printf("\n%-22s", "late msg latency (us)");
  for (auto& [name, n] : cols) std::printf("%18.2f", n.late_latency_us);
  for (size_t s : kSizes) {
    std::printf("\n%-22s",
                fmt::format("GB/s, {} msgs", human_bytes(static_cast<double>(s))).c_str());
    for (auto& [name, n] : cols) std::printf("%18.3f", n.gbytes_per_s.at(s));
  }
  std::printf("\n");
  return 0;
}
