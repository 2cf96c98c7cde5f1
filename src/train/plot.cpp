#include "llmtrain/train/plot.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace llmtrain::train {
namespace {

struct Point {
  double x, y;
};

// Round tick positions covering [lo, hi]: steps of 1, 2 or 5 times a power of ten, about `n` of them.
std::vector<double> ticks(double lo, double hi, int n) {
  const double raw = (hi - lo) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

}  // namespace

std::string loss_curves_svg(const std::string& metrics_jsonl, const std::string& title) {
  std::vector<Point> train, val;
  std::istringstream in(metrics_jsonl);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step")) continue;
    const char* key = j.value("type", "") == "train" ? "loss" : j.value("type", "") == "eval" ? "val_loss" : nullptr;
    if (!key || !j.contains(key) || !j[key].is_number()) continue;
    const Point p{j["step"].get<double>(), j[key].get<double>()};
    if (std::isfinite(p.y)) (key[0] == 'l' ? train : val).push_back(p);
  }

  constexpr double W = 800, H = 480, left = 70, right = 20, top = 40, bottom = 50;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
      << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << escape_xml(title)
      << "</text>\n";
  if (train.empty() && val.empty()) {
    svg << "<text x=\"" << W / 2 << "\" y=\"" << H / 2
        << "\" text-anchor=\"middle\">no loss records yet</text>\n</svg>\n";
    return svg.str();
  }
  double x0 = 0, x1 = 1, y0 = INFINITY, y1 = -INFINITY;
  for (const auto* series : {&train, &val})
    for (const auto& p : *series) {
      x1 = std::max(x1, p.x);
      y0 = std::min(y0, p.y);
      y1 = std::max(y1, p.y);
    }
  const double pad = std::max(1e-3, (y1 - y0) * 0.05);
  y0 -= pad;
  y1 += pad;
  const auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  const auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * (H - top - bottom); };

  // Axes, grid and tick labels.
  for (double t : ticks(x0, x1, 8))
    svg << "<line x1=\"" << px(t) << "\" y1=\"" << top << "\" x2=\"" << px(t) << "\" y2=\"" << H - bottom
        << "\" stroke=\"#eee\"/><text x=\"" << px(t) << "\" y=\"" << H - bottom + 16 << "\" text-anchor=\"middle\">"
        << fmt("%g", t) << "</text>\n";
  for (double t : ticks(y0, y1, 6))
    svg << "<line x1=\"" << left << "\" y1=\"" << py(t) << "\" x2=\"" << W - right << "\" y2=\"" << py(t)
        << "\" stroke=\"#eee\"/><text x=\"" << left - 6 << "\" y=\"" << py(t) + 4 << "\" text-anchor=\"end\">"
        << fmt("%g", t) << "</text>\n";
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << W - left - right << "\" height=\""
      << H - top - bottom << "\" fill=\"none\" stroke=\"#444\"/>\n"
      << "<text x=\"" << (left + W - right) / 2 << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\">step</text>\n"
      << "<text x=\"16\" y=\"" << (top + H - bottom) / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
      << (top + H - bottom) / 2 << ")\">loss</text>\n";

  const auto polyline = [&](const std::vector<Point>& pts, const char* style) {
    if (pts.empty()) return;
    svg << "<polyline fill=\"none\" " << style << " points=\"";
    for (const auto& p : pts) svg << fmt("%.1f", px(p.x)) << "," << fmt("%.1f", py(p.y)) << " ";
    svg << "\"/>\n";
  };
  // The raw train loss is noisy; an exponential moving average (bias-corrected) shows its trend.
  std::vector<Point> smooth;
  const double beta = train.size() > 50 ? 0.9 : 0.5;
  double avg = 0;
  for (size_t i = 0; i < train.size(); ++i) {
    avg = beta * avg + (1 - beta) * train[i].y;
    smooth.push_back({train[i].x, avg / (1 - std::pow(beta, double(i + 1)))});
  }
  polyline(train, "stroke=\"#9ecae1\" stroke-width=\"1\"");
  polyline(smooth, "stroke=\"#1f77b4\" stroke-width=\"2\"");
  polyline(val, "stroke=\"#d62728\" stroke-width=\"2\"");
  for (const auto& p : val)
    svg << "<circle cx=\"" << fmt("%.1f", px(p.x)) << "\" cy=\"" << fmt("%.1f", py(p.y))
        << "\" r=\"3\" fill=\"#d62728\"/>\n";

  // Legend, with the last values.
  const double lx = W - right - 210, ly = top + 14;
  svg << "<rect x=\"" << lx - 8 << "\" y=\"" << ly - 14 << "\" width=\"206\" height=\"" << (val.empty() ? 26 : 44)
      << "\" fill=\"white\" stroke=\"#ccc\"/>\n";
  if (!train.empty())
    svg << "<line x1=\"" << lx << "\" y1=\"" << ly - 4 << "\" x2=\"" << lx + 20 << "\" y2=\"" << ly - 4
        << "\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"" << lx + 26 << "\" y=\"" << ly << "\">train loss "
        << fmt("%.4f", smooth.back().y) << " (smoothed)</text>\n";
  if (!val.empty())
    svg << "<line x1=\"" << lx << "\" y1=\"" << ly + 14 << "\" x2=\"" << lx + 20 << "\" y2=\"" << ly + 14
        << "\" stroke=\"#d62728\" stroke-width=\"2\"/><text x=\"" << lx + 26 << "\" y=\"" << ly + 18 << "\">val loss "
        << fmt("%.4f", val.back().y) << "</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace llmtrain::train
