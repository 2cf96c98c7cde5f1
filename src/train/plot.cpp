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

// A line on a panel; one with a label is in the panel's legend (with `last`, its last value).
struct Series {
  std::vector<Point> pts;
  std::string color, label;
  double width = 2;
  bool dots = false;
  double last = 0;
  std::string suffix;  // after the value
};

// One panel: axes with ticks over steps [0, x1] and the series' values, the series, and a legend.
void panel(std::ostringstream& svg, double W, double top, double height, double x1, const std::vector<Series>& series,
           const char* ylabel) {
  constexpr double left = 70, right = 20, bottom = 50;
  const double H = top + height;
  double y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : series)
    for (const auto& p : s.pts) {
      y0 = std::min(y0, p.y);
      y1 = std::max(y1, p.y);
    }
  const double pad = std::max(1e-3, (y1 - y0) * 0.05);
  y0 -= pad;
  y1 += pad;
  const auto px = [&](double x) { return left + x / x1 * (W - left - right); };
  const auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * (H - top - bottom); };

  // Axes, grid and tick labels.
  for (double t : ticks(0, x1, 8))
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
      << (top + H - bottom) / 2 << ")\">" << ylabel << "</text>\n";

  for (const auto& s : series) {
    if (s.pts.empty()) continue;
    svg << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"" << s.width << "\" points=\"";
    for (const auto& p : s.pts) svg << fmt("%.1f", px(p.x)) << "," << fmt("%.1f", py(p.y)) << " ";
    svg << "\"/>\n";
    if (s.dots)
      for (const auto& p : s.pts)
        svg << "<circle cx=\"" << fmt("%.1f", px(p.x)) << "\" cy=\"" << fmt("%.1f", py(p.y)) << "\" r=\"3\" fill=\""
            << s.color << "\"/>\n";
  }

  // Legend, with the last values.
  std::vector<const Series*> shown;
  for (const auto& s : series)
    if (!s.label.empty() && !s.pts.empty()) shown.push_back(&s);
  const double lx = W - right - 250, ly = top + 14;
  svg << "<rect x=\"" << lx - 8 << "\" y=\"" << ly - 14 << "\" width=\"246\" height=\"" << 8 + 18 * shown.size()
      << "\" fill=\"white\" stroke=\"#ccc\"/>\n";
  for (size_t i = 0; i < shown.size(); ++i)
    svg << "<line x1=\"" << lx << "\" y1=\"" << ly - 4 + 18 * i << "\" x2=\"" << lx + 20 << "\" y2=\""
        << ly - 4 + 18 * i << "\" stroke=\"" << shown[i]->color << "\" stroke-width=\"2\"/><text x=\"" << lx + 26
        << "\" y=\"" << ly + 18 * i << "\">" << escape_xml(shown[i]->label) << " " << fmt("%.4f", shown[i]->last)
        << shown[i]->suffix << "</text>\n";
}

}  // namespace

std::string loss_curves_svg(const std::string& metrics_jsonl, const std::string& title) {
  std::vector<Point> train, val;
  std::vector<std::pair<std::string, std::vector<Point>>> tasks;  // each task's first score, by "name score"
  std::istringstream in(metrics_jsonl);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number()) continue;
    const std::string type = j.value("type", "");
    if (type == "eval_task") {
      const std::string score =
          j.contains("primary") && j["primary"].is_string() ? j["primary"].get<std::string>() : "";
      if (score.empty() || !j.contains(score) || !j[score].is_number() || !j.contains("name") || !j["name"].is_string())
        continue;
      const std::string label = j["name"].get<std::string>() + " " + score;
      auto it = std::find_if(tasks.begin(), tasks.end(), [&](const auto& t) { return t.first == label; });
      if (it == tasks.end()) it = tasks.insert(tasks.end(), {label, {}});
      const Point p{j["step"].get<double>(), j[score].get<double>()};
      if (std::isfinite(p.y)) it->second.push_back(p);
      continue;
    }
    const char* key = type == "train" ? "loss" : type == "eval" ? "val_loss" : nullptr;
    if (!key || !j.contains(key) || !j[key].is_number()) continue;
    const Point p{j["step"].get<double>(), j[key].get<double>()};
    if (std::isfinite(p.y)) (key[0] == 'l' ? train : val).push_back(p);
  }

  // A second panel below the losses holds the evaluation tasks' scores, when a run has any.
  const bool scores = std::any_of(tasks.begin(), tasks.end(), [](const auto& t) { return !t.second.empty(); });
  constexpr double W = 800, top = 40, loss_h = 440, task_h = 320;
  const double H = top + loss_h + (scores ? task_h : 0);
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
  double x1 = 1;
  for (const auto* series : {&train, &val})
    for (const auto& p : *series) x1 = std::max(x1, p.x);
  for (const auto& t : tasks)
    for (const auto& p : t.second) x1 = std::max(x1, p.x);

  // The raw train loss is noisy; an exponential moving average (bias-corrected) shows its trend.
  Series raw{train, "#9ecae1", "", 1}, smooth{{}, "#1f77b4", "train loss"};
  smooth.suffix = " (smoothed)";
  const double beta = train.size() > 50 ? 0.9 : 0.5;
  double avg = 0;
  for (size_t i = 0; i < train.size(); ++i) {
    avg = beta * avg + (1 - beta) * train[i].y;
    smooth.pts.push_back({train[i].x, avg / (1 - std::pow(beta, double(i + 1)))});
  }
  if (!smooth.pts.empty()) smooth.last = smooth.pts.back().y;
  Series v{val, "#d62728", "val loss", 2, true, val.empty() ? 0 : val.back().y};
  panel(svg, W, top, loss_h, x1, {raw, smooth, v}, "loss");
  if (scores) {
    static const char* colors[] = {"#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
    std::vector<Series> s;
    for (size_t i = 0; i < tasks.size(); ++i)
      if (!tasks[i].second.empty())
        s.push_back({tasks[i].second, colors[i % 6], tasks[i].first, 2, true, tasks[i].second.back().y});
    panel(svg, W, top + loss_h, task_h, x1, s, "task score");
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace llmtrain::train
