#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace ds::planner {

std::vector<InstanceLayout> CandidateLayouts(const PlanContext& ctx, Role role, int max_devices) {
  const auto& hw = ctx.hw;
  const int dpn = hw.devices_per_node;
  if (max_devices <= 0) max_devices = std::max(32 * dpn, hw.scale_up_devices > dpn ? hw.scale_up_devices : 0);
  std::set<int> sizes;
  const std::vector<int> nodes = role == Role::kDecode ? std::vector<int>{1, 2, 4, 8, 16, 18, 32, 40, 48}
                                                       : std::vector<int>{1, 2, 4, 8};
  for (int n : nodes)
    if (n * dpn <= max_devices) sizes.insert(n * dpn);
  // Sub-node instances for models that fit on fewer devices (V2-Lite: one GPU).
  for (int d = 1; d < dpn; d *= 2)
    if (d <= max_devices) sizes.insert(d);
  if (sizes.empty()) sizes.insert(std::min(max_devices, dpn));
  const int n_routed = ctx.shapes.n_routed;
  std::vector<InstanceLayout> out;
  // Fewest redundant experts that make (n_routed + r) a multiple of the EP degree (> 0).
  auto fill = [&](int ep) {
    int r = (ep - n_routed % ep) % ep;
    return r == 0 ? ep : r;
  };
  for (int d : sizes) {
    for (int pp : {1, 2, 4}) {
      // Prefill may pipeline (chunked) over stages of at least one node each.
      if (pp > 1 && (role == Role::kDecode || d % pp || d / pp < dpn)) continue;
      const int g = d / pp;
      for (int tp : {1, 2, 4, 8}) {
        if (tp > dpn || g % tp) continue;
        for (MoeComm comm : {MoeComm::kAllToAll, MoeComm::kAllGatherReduceScatter}) {
          for (bool mbo : {true, false}) {
            if (g == 1 && (comm != MoeComm::kAllToAll || mbo)) continue;  // nothing to communicate
            std::vector<int> redundant = {0};
            if (n_routed > 0 && g > 1 && fill(g) <= 64) redundant.push_back(fill(g));
            for (int r : redundant) {
              InstanceLayout l;
              l.role = role;
              l.devices = d;
              l.pp = pp;
              l.attention_tp = tp;
              l.moe_comm = comm;
              l.micro_batch_overlap = mbo;
              l.redundant_experts = r;
              out.push_back(l);
            }
          }
        }
      }
    }
  }
  return out;
}

std::vector<RoleResult> SearchRole(const PlanContext& ctx, const Deployment& base, Role role, const SearchOptions& opt,
                                   std::vector<RoleResult>* all) {
  std::vector<RoleResult> ok;
  for (const auto& l : CandidateLayouts(ctx, role, opt.max_devices)) {
    RoleResult r = EvaluateRole(ctx, base, l);
    if (all) all->push_back(r);
    if (r.feasible) ok.push_back(std::move(r));
  }
  std::sort(ok.begin(), ok.end(), [](const RoleResult& a, const RoleResult& b) {
    if (std::fabs(a.per_device_tok_s - b.per_device_tok_s) > 1e-6 * std::max(1.0, a.per_device_tok_s))
      return a.per_device_tok_s > b.per_device_tok_s;
    return a.layout.devices < b.layout.devices;  // fewer devices first on ties
  });
  if (static_cast<int>(ok.size()) > opt.top) ok.resize(opt.top);
  return ok;
}

PdSplit SplitPd(const PlanContext& ctx, const RoleResult& prefill, const RoleResult& decode, int total_devices) {
  PdSplit s;
  const auto& w = ctx.workload;
  // Requests per second one instance sustains.
  const double pre_rps = prefill.per_device_tok_s * prefill.layout.devices / std::max(1, w.input_len);
  const double dec_rps = decode.per_device_tok_s * decode.layout.devices / std::max(1, w.output_len);
  if (pre_rps <= 0 || dec_rps <= 0) return s;
  auto eval = [&](int p, int d) {
    PdSplit x;
    x.prefill_instances = p;
    x.decode_instances = d;
    x.devices = p * prefill.layout.devices + d * decode.layout.devices;
    x.requests_per_s = std::min(p * pre_rps, d * dec_rps);
    x.output_tok_s_per_device = x.requests_per_s * w.output_len / x.devices;
    return x;
  };
  if (total_devices <= 0) {
    int d = 1;
    if (w.concurrency > 0)
      d = std::max(1, static_cast<int>(std::ceil(w.concurrency / (decode.concurrency_per_device * decode.layout.devices) - 1e-9)));
    return eval(static_cast<int>(std::ceil(d * dec_rps / pre_rps - 1e-9)), d);
  }
  for (int d = 1; d * decode.layout.devices < total_devices; ++d) {
    for (int p = 1; p * prefill.layout.devices + d * decode.layout.devices <= total_devices; ++p) {
      PdSplit x = eval(p, d);
      if (x.requests_per_s > s.requests_per_s * (1 + 1e-9) ||
          (std::fabs(x.requests_per_s - s.requests_per_s) <= 1e-9 * x.requests_per_s && x.devices < s.devices))
        s = x;
    }
  }
  return s;
}

std::pair<std::vector<FrontierPoint>, std::vector<FrontierPoint>> DecodeFrontier(
    const PlanContext& ctx_in, const Deployment& base, const std::vector<InstanceLayout>& layouts) {
  PlanContext ctx = ctx_in;
  ctx.slo.tpot_ms = 0;  // the frontier spans all latencies
  std::vector<FrontierPoint> pts;
  for (const auto& l0 : layouts) {
    for (double b = 1.0 / l0.attention_tp; b <= 2048; b *= 1.25) {
      InstanceLayout l = l0;
      l.batch = std::round(b * l0.attention_tp) / l0.attention_tp;
      RoleResult r = EvaluateDecode(ctx, base, l);
      if (!r.feasible) break;  // memory: larger batches do not fit either
      pts.push_back({r.tok_s_per_user, r.per_device_tok_s, l.batch, r.tpot_ms, l.Summary()});
    }
  }
  // Pareto frontier: maximise both coordinates.
  std::vector<FrontierPoint> sorted = pts;
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.tok_s_per_user > b.tok_s_per_user; });
  std::vector<FrontierPoint> front;
  double best_y = -1;
  for (const auto& p : sorted) {
    if (p.per_device_tok_s > best_y) {
      front.push_back(p);
      best_y = p.per_device_tok_s;
    }
  }
  std::reverse(front.begin(), front.end());
  return {pts, front};
}

std::string FrontierSvg(const std::vector<FrontierPoint>& points, const std::vector<FrontierPoint>& frontier,
                        const std::string& title, double slo_x) {
  const double W = 860, H = 560, L = 80, R = 250, T = 50, B = 60;
  double xmax = 1, ymax = 1;
  for (const auto& p : points) {
    xmax = std::max(xmax, p.tok_s_per_user);
    ymax = std::max(ymax, p.per_device_tok_s);
  }
  auto nice = [](double v) {
    const double e = std::pow(10.0, std::floor(std::log10(v)));
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
      if (m * e >= v) return m * e;
    return 10 * e;
  };
  xmax = nice(xmax * 1.05);
  ymax = nice(ymax * 1.05);
  auto X = [&](double x) { return L + (W - L - R) * x / xmax; };
  auto Y = [&](double y) { return H - B - (H - T - B) * y / ymax; };
  auto esc = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '&') o += "&amp;";
      else if (c == '<') o += "&lt;";
      else if (c == '>') o += "&gt;";
      else o += c;
    }
    return o;
  };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << L << "\" y=\"28\" font-size=\"15\">" << esc(title) << "</text>\n";
  // Axes and grid.
  for (int i = 0; i <= 5; ++i) {
    const double xv = xmax * i / 5, yv = ymax * i / 5;
    os << "<line x1=\"" << X(xv) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(xv) << "\" y2=\"" << Y(ymax)
       << "\" stroke=\"#ddd\"/>\n<text x=\"" << X(xv) << "\" y=\"" << Y(0) + 18 << "\" text-anchor=\"middle\">" << xv
       << "</text>\n";
    os << "<line x1=\"" << X(0) << "\" y1=\"" << Y(yv) << "\" x2=\"" << X(xmax) << "\" y2=\"" << Y(yv)
       << "\" stroke=\"#ddd\"/>\n<text x=\"" << X(0) - 6 << "\" y=\"" << Y(yv) + 4 << "\" text-anchor=\"end\">" << yv
       << "</text>\n";
  }
  os << "<line x1=\"" << X(0) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(xmax) << "\" y2=\"" << Y(0) << "\" stroke=\"black\"/>\n";
  os << "<line x1=\"" << X(0) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(0) << "\" y2=\"" << Y(ymax) << "\" stroke=\"black\"/>\n";
  os << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 15 << "\" text-anchor=\"middle\">output tokens/s per user (1000 / TPOT ms)</text>\n";
  os << "<text transform=\"translate(20," << (T + H - B) / 2 << ") rotate(-90)\" text-anchor=\"middle\">output tokens/s per device</text>\n";
  if (slo_x > 0 && slo_x <= xmax)
    os << "<line x1=\"" << X(slo_x) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(slo_x) << "\" y2=\"" << Y(ymax)
       << "\" stroke=\"#c00\" stroke-dasharray=\"5,4\"/>\n<text x=\"" << X(slo_x) + 4 << "\" y=\"" << Y(ymax) + 12
       << "\" fill=\"#c00\">TPOT SLO</text>\n";
  // Points: one colour per layout that reaches the frontier (at most 9), grey for the rest.
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                  "#e377c2", "#17becf", "#bcbd22", "#d62728"};
  std::map<std::string, int> color;
  for (const auto& p : frontier)
    if (!color.count(p.layout) && color.size() < 9) color[p.layout] = static_cast<int>(color.size());
  for (const auto& p : points) {
    auto it = color.find(p.layout);
    os << "<circle cx=\"" << X(p.tok_s_per_user) << "\" cy=\"" << Y(p.per_device_tok_s) << "\" r=\""
       << (it == color.end() ? "1.5" : "2.5") << "\" fill=\"" << (it == color.end() ? "#c8c8c8" : kColors[it->second])
       << "\"/>\n";
  }
  os << "<polyline fill=\"none\" stroke=\"black\" stroke-width=\"2\" points=\"";
  for (const auto& p : frontier) os << X(p.tok_s_per_user) << "," << Y(p.per_device_tok_s) << " ";
  os << "\"/>\n";
  int i = 0;
  for (const auto& [name, c] : color) {
    const double y = T + 10 + 16 * i++;
    os << "<circle cx=\"" << W - R + 12 << "\" cy=\"" << y << "\" r=\"4\" fill=\"" << kColors[c % 9] << "\"/>\n<text x=\""
       << W - R + 20 << "\" y=\"" << y + 4 << "\" font-size=\"10\">" << esc(name) << "</text>\n";
  }
  os << "<text x=\"" << W - R + 12 << "\" y=\"" << T + 14 + 16 * i << "\" font-size=\"10\">black line: frontier; grey: other layouts</text>\n";
  os << "</svg>\n";
  return os.str();
}

}  // namespace ds::planner
