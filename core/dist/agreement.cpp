// Comparing what every process must hold equal: records gathered over MPI, the first difference named.
#include "core/dist/agreement.h"

#include <fmt/format.h>

#include <map>

#include "core/dist/mpi_world.h"

namespace trainer {
namespace {

// A record as bytes: each name and value length-prefixed, so any text survives the trip.
std::string encode(const std::vector<AgreedField>& fields) {
  std::string s;
  for (const AgreedField& f : fields)
    for (const std::string* t : {&f.name, &f.value}) s += fmt::format("{}:{}", t->size(), *t);
  return s;
}

// Names and values back from encode(); the codes and hints are this process's (the same build).
// Empty when the bytes do not fit `like` (another trainer build with other fields).
std::vector<AgreedField> decode(const std::string& s, const std::vector<AgreedField>& like) {
  std::vector<AgreedField> out;
  size_t at = 0;
  auto next = [&](std::string& t) {
    size_t colon = s.find(':', at);
    if (colon == std::string::npos) return false;
    size_t n = 0;
    for (size_t i = at; i < colon; ++i) {
      if (s[i] < '0' || s[i] > '9' || n > s.size()) return false;
      n = n * 10 + size_t(s[i] - '0');
    }
    if (colon == at || n > s.size() - colon - 1) return false;
    t = s.substr(colon + 1, n);
    at = colon + 1 + n;
    return true;
  };
  for (const AgreedField& l : like) {
    AgreedField f = l;
    if (!next(f.name) || f.name != l.name || !next(f.value)) return {};
    out.push_back(f);
  }
  return at == s.size() ? out : std::vector<AgreedField>{};
}

// "process 1", "processes 0, 2-4".
std::string processes(const std::vector<int>& p) {
  std::string s;
  for (size_t i = 0; i < p.size();) {
    size_t j = i;
    while (j + 1 < p.size() && p[j + 1] == p[j] + 1) ++j;
    s += fmt::format("{}{}", s.empty() ? "" : ", ", j == i ? fmt::format("{}", p[i]) : fmt::format("{}-{}", p[i], p[j]));
    i = j + 1;
  }
  return fmt::format("{} {}", p.size() == 1 ? "process" : "processes", s);
}

}  // namespace

std::string disagreement(const std::vector<std::vector<AgreedField>>& records, int* code) {
  if (records.size() < 2) return "";
  for (size_t f = 0; f < records[0].size(); ++f) {
    std::vector<std::string> order;  // the values in order of first appearance
    std::map<std::string, std::vector<int>> who;
    for (size_t p = 0; p < records.size(); ++p) {
      const std::string& v = records[p][f].value;
      if (!who.count(v)) order.push_back(v);
      who[v].push_back(int(p));
    }
    if (order.size() < 2) continue;
    // "16 on process 0, 12 on process 1"; "16 on processes 0-2, 4; 12 on process 3".
    const char* between = order.size() == records.size() ? ", " : "; ";
    std::string values;
    for (const std::string& v : order) values += fmt::format("{}{} on {}", values.empty() ? "" : between, v, processes(who[v]));
    const AgreedField& x = records[0][f];
    if (code) *code = x.code;
    return fmt::format("processes disagree: {} {}{}", x.name, values, x.hint.empty() ? "" : fmt::format(" ({})", x.hint));
  }
  return "";
}

void check_processes_agree(const std::vector<AgreedField>& fields) {
  const std::vector<std::string> all = mpi::allgather(encode(fields));
  std::vector<std::vector<AgreedField>> records;
  for (size_t p = 0; p < all.size(); ++p) {
    records.push_back(decode(all[p], fields));
    if (records.back().empty() && !fields.empty())
      throw DisagreementError(2, fmt::format("processes disagree: process {} runs another trainer build than process {} "
                                             "(its start-up record differs; every process must run the same binary)",
                                             p, mpi::rank()));
  }
  int code = 2;
  if (std::string line = disagreement(records, &code); !line.empty()) throw DisagreementError(code, line);
}

}  // namespace trainer
