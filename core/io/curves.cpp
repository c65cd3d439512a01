// curves.png with PLplot: one axes, train/val loss and accuracy per epoch, ggplot colours.
// PLplot keeps global state (a stream table, error handlers) and is not thread-safe: every call
// happens under one mutex, on a stream of its own (plmkstrm ... plend1), and the caller's current
// stream is restored. Its fatal errors (plexit) would print and exit(): the exit handler jumps
// back into draw() instead, which returns false. Device and file problems are checked first, so
// PLplot is never left to prompt on stdin for a device or to print its menu on stdout.
#include "core/io/curves.h"

#include <fmt/format.h>
#include <plplot.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

namespace trainer {
namespace {

constexpr int kWidth = 800, kHeight = 600;

// cmap0 entries used below.
enum Colour { kBackground = 0, kPanel = 1, kGrid = 2, kInk = 3, kLine0 = 4 };

struct Series {
  const char* metric;
  const char* label;
  unsigned rgb;
  std::vector<double> x, y;
};

// What draw() needs, as plain pointers: draw() may be left by longjmp, so nothing it touches
// may own memory.
struct Frame {
  double xmin, xmax, ymin, ymax, xtick;
  const char* title;
  int position;  // PL_POSITION_* for the legend
  int n;
  const double* const* xs;
  const double* const* ys;
  const int* counts;
  const char* const* labels;
  const unsigned* rgbs;
  const char* file;
};

std::mutex plplot_mutex;
std::jmp_buf fatal_jump;
bool jump_armed = false;
char fatal_message[256];
char abort_message[256];

int on_plexit(const char* msg) {
  std::snprintf(fatal_message, sizeof fatal_message, "%s", msg && *msg ? msg : "PLplot stopped with an error");
  if (jump_armed) std::longjmp(fatal_jump, 1);
  return 1;  // not ours: PLplot's default (print, exit)
}

void on_plabort(const char* msg) {
  if (!abort_message[0]) std::snprintf(abort_message, sizeof abort_message, "%s", msg ? msg : "PLplot aborted a call");
}

void set_colour(int index, unsigned rgb) { plscol0(index, (rgb >> 16) & 255, (rgb >> 8) & 255, rgb & 255); }

// Whether PLplot found its pngcairo driver (package plplot-driver-cairo). Asked before plinit(),
// which would otherwise print a device menu on stdout and read the answer from stdin.
bool has_pngcairo() {
  static const char* menu[128];
  static const char* names[128];
  const char** m = menu;
  const char** d = names;
  int n = 128;
  plgDevs(&m, &d, &n);
  for (int i = 0; i < n; ++i)
    if (names[i] && std::strcmp(names[i], "pngcairo") == 0) return true;
  return false;
}

enum class Drawn { kOk, kFatal, kNoDevice };

// Every PLplot call of one plot, on a stream of its own; `previous` is made current again.
Drawn draw(const Frame& f, PLINT previous) {
  volatile PLINT stream = -1;
  if (setjmp(fatal_jump) != 0) {
    jump_armed = false;
    if (stream >= 0) {
      plsstrm(stream);
      plend1();
    }
    plsstrm(previous);
    return Drawn::kFatal;
  }
  jump_armed = true;
  if (!has_pngcairo()) {
    jump_armed = false;
    return Drawn::kNoDevice;
  }
  PLINT s = -1;
  plmkstrm(&s);  // a fresh stream, now the current one
  if (s < 0) {
    jump_armed = false;
    std::snprintf(fatal_message, sizeof fatal_message, "no free stream");
    plsstrm(previous);
    return Drawn::kFatal;
  }
  stream = s;
  plsdev("pngcairo");
  plsfnam(f.file);
  plspage(0, 0, kWidth, kHeight, 0, 0);
  plspause(0);
  plscolbg(255, 255, 255);
  set_colour(kPanel, 0xE5E5E5);
  set_colour(kGrid, 0xFFFFFF);
  set_colour(kInk, 0x555555);
  for (int i = 0; i < f.n; ++i) set_colour(kLine0 + i, f.rgbs[i]);
  plinit();
  pladv(0);
  plvpor(0.10, 0.95, 0.11, 0.90);
  plwind(f.xmin, f.xmax, f.ymin, f.ymax);
  PLFLT px[4] = {f.xmin, f.xmax, f.xmax, f.xmin}, py[4] = {f.ymin, f.ymin, f.ymax, f.ymax};
  plcol0(kPanel);
  plfill(4, px, py);
  plcol0(kGrid);
  plwidth(1.5);
  plbox("g", f.xtick, 0, "g", 0, 0);
  plcol0(kInk);
  plwidth(1.0);
  plschr(0, 0.9);
  plbox("nst", f.xtick, 0, "nstv", 0, 0);
  plschr(0, 1.0);
  plmtex("b", 2.8, 0.5, 0.5, "Epoch ##");
  plmtex("l", 4.2, 0.5, 0.5, "Loss/Accuracy");
  plschr(0, 1.15);
  plmtex("t", 1.5, 0.5, 0.5, f.title);
  plschr(0, 1.0);
  plwidth(2.0);
  // A dot of 5 pixels' radius in world units (the viewport is 0.85 x 0.79 of the page).
  double rx = 5 * (f.xmax - f.xmin) / (0.85 * kWidth), ry = 5 * (f.ymax - f.ymin) / (0.79 * kHeight);
  for (int i = 0; i < f.n; ++i) {
    plcol0(kLine0 + i);
    // Runs of finite values: a line each, or a dot for a run of one.
    int begin = 0;
    for (int j = 0; j <= f.counts[i]; ++j) {
      bool ok = j < f.counts[i] && std::isfinite(f.ys[i][j]);
      if (ok) continue;
      int len = j - begin;
      if (len == 1) plarc(f.xs[i][begin], f.ys[i][begin], rx, ry, 0, 360, 0, 1);
      if (len > 1) plline(len, f.xs[i] + begin, f.ys[i] + begin);
      begin = j + 1;
    }
  }
  PLINT opts[4], text_colours[4], line_colours[4], line_styles[4];
  PLFLT line_widths[4];
  for (int i = 0; i < f.n; ++i) {
    opts[i] = PL_LEGEND_LINE;
    text_colours[i] = kInk;
    line_colours[i] = kLine0 + i;
    line_styles[i] = 1;
    line_widths[i] = 2.0;
  }
  PLFLT lw = 0, lh = 0;
  plschr(0, 0.85);
  pllegend(&lw, &lh, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, f.position | PL_POSITION_INSIDE | PL_POSITION_VIEWPORT,
           0.02, 0.03, 0.07, kBackground, kPanel, 1, 0, 0, f.n, opts, 0.8, 1.0, 2.0, 0.0, text_colours,
           const_cast<const char**>(f.labels), nullptr, nullptr, nullptr, nullptr, line_colours, line_styles, line_widths,
           nullptr, nullptr, nullptr, nullptr);
  plend1();  // writes the PNG and frees the stream
  stream = -1;
  jump_armed = false;
  plsstrm(previous);
  return Drawn::kOk;
}

// PLplot text treats '#' as its escape character.
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '#' ? std::string("##") : std::string(1, c);
  return out;
}

// A whole, complete PNG: the signature first and the IEND chunk last.
bool png_complete(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const char sig[] = "\x89PNG\r\n\x1a\n";
  static const char iend[] = "IEND\xae\x42\x60\x82";
  return data.size() > 40 && data.compare(0, 8, sig, 8) == 0 && data.compare(data.size() - 8, 8, iend, 8) == 0;
}

// The legend's box as fractions of the plot area (4 entries at the text size draw() uses: about
// 0.24 x 0.20), with a margin.
double legend_width() { return 0.27; }
double legend_height(size_t entries) { return 0.04 + 0.045 * double(entries); }

// Curve points (segments sampled 16 times) inside the legend's box at PL_POSITION_* `corner`.
long legend_hits(const std::vector<Series>& series, int corner, double xmin, double xmax, double ymin, double ymax) {
  double bw = legend_width(), bh = legend_height(series.size());
  double x0 = (corner & PL_POSITION_LEFT) ? 0 : 1 - bw, y0 = (corner & PL_POSITION_BOTTOM) ? 0 : 1 - bh;
  long hits = 0;
  for (const Series& s : series)
    for (size_t j = 0; j < s.y.size(); ++j) {
      if (!std::isfinite(s.y[j])) continue;
      bool segment = j + 1 < s.y.size() && std::isfinite(s.y[j + 1]);
      for (int k = 0; k < (segment ? 16 : 1); ++k) {
        double t = k / 16.0;
        double x = segment ? s.x[j] + t * (s.x[j + 1] - s.x[j]) : s.x[j];
        double y = segment ? s.y[j] + t * (s.y[j + 1] - s.y[j]) : s.y[j];
        double u = (x - xmin) / (xmax - xmin), v = (y - ymin) / (ymax - ymin);
        hits += u >= x0 && u <= x0 + bw && v >= y0 && v <= y0 + bh;
      }
    }
  return hits;
}

// The first corner, in matplotlib's loc="best" order, whose legend box covers no curve, or -1.
int free_corner(const std::vector<Series>& series, double xmin, double xmax, double ymin, double ymax) {
  for (int c : {PL_POSITION_RIGHT | PL_POSITION_TOP, PL_POSITION_LEFT | PL_POSITION_TOP,
                PL_POSITION_LEFT | PL_POSITION_BOTTOM, PL_POSITION_RIGHT | PL_POSITION_BOTTOM})
    if (legend_hits(series, c, xmin, xmax, ymin, ymax) == 0) return c;
  return -1;
}

}  // namespace

bool plot_curves(const std::vector<std::pair<int, Metrics>>& rows, const std::string& png_path,
                 const std::string& model_name, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return false;
  };
  // Keras article order and ggplot colours: train_loss, val_loss, train_acc, val_acc.
  std::vector<Series> all = {{"loss", "train_loss", 0xE24A33, {}, {}},
                             {"val_loss", "val_loss", 0x348ABD, {}, {}},
                             {"accuracy", "train_acc", 0x988ED5, {}, {}},
                             {"val_accuracy", "val_acc", 0x777777, {}, {}}};
  std::vector<Series> series;
  double xmin = INFINITY, xmax = -INFINITY, ymin = 0, ymax = 1;
  for (Series& s : all) {
    bool any = false;
    for (const auto& [epoch, m] : rows)
      for (const auto& [k, v] : m)
        if (k == s.metric) {
          s.x.push_back(epoch);
          s.y.push_back(v);
          if (std::isfinite(v)) {
            any = true;
            ymin = std::min(ymin, v);
            ymax = std::max(ymax, v);
            xmin = std::min(xmin, double(epoch));
            xmax = std::max(xmax, double(epoch));
          }
        }
    if (any) series.push_back(std::move(s));
  }
  if (series.empty()) return fail("no finite loss or accuracy values to plot");
  if (xmax - xmin < 1) {  // one epoch: a dot in the middle
    xmin -= 0.5;
    xmax += 0.5;
  }
  ymax += 0.05 * (ymax - ymin);
  int corner = free_corner(series, xmin, xmax, ymin, ymax);
  if (corner < 0) {  // every corner has a curve: raise the top so the legend fits above them all
    ymax = ymin + (ymax - ymin) / (1 - legend_height(series.size()));
    corner = PL_POSITION_RIGHT | PL_POSITION_TOP;
  }
  double span = xmax - xmin;
  double xtick = span <= 10 ? 1 : 0;  // whole epochs when few, PLplot's choice otherwise

  std::string tmp = png_path + ".tmp";
  {
    std::FILE* probe = std::fopen(tmp.c_str(), "wb");
    if (!probe) return fail(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
    std::fclose(probe);
  }
  std::string title = "Training Loss and Accuracy" + (model_name.empty() ? "" : " (" + escape(model_name) + ")");
  std::vector<const double*> xs, ys;
  std::vector<int> counts;
  std::vector<const char*> labels;
  std::vector<unsigned> rgbs;
  for (const Series& s : series) {
    xs.push_back(s.x.data());
    ys.push_back(s.y.data());
    counts.push_back(int(s.y.size()));
    labels.push_back(s.label);
    rgbs.push_back(s.rgb);
  }
  Frame f{xmin, xmax, ymin, ymax, xtick, title.c_str(), corner, int(series.size()),
          xs.data(), ys.data(), counts.data(), labels.data(), rgbs.data(), tmp.c_str()};

  bool drawn = false;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(plplot_mutex);
    plsexit(on_plexit);
    plsabort(on_plabort);
    fatal_message[0] = abort_message[0] = '\0';
    PLINT previous = 0;
    plgstrm(&previous);
    Drawn d = draw(f, previous);
    if (d == Drawn::kNoDevice) why = "PLplot has no pngcairo device (install plplot-driver-cairo)";
    if (d == Drawn::kFatal) why = fmt::format("PLplot: {}", fatal_message);
    if (d == Drawn::kOk && abort_message[0]) why = fmt::format("PLplot: {}", abort_message);
    drawn = why.empty();
  }
  std::error_code ec;
  if (drawn && !png_complete(tmp)) drawn = false, why = fmt::format("PLplot wrote no complete PNG to {}", tmp);
  if (drawn) {
    std::filesystem::rename(tmp, png_path, ec);
    if (ec) drawn = false, why = fmt::format("cannot rename {} to {}: {}", tmp, png_path, ec.message());
  }
  if (!drawn) {
    std::filesystem::remove(tmp, ec);
    return fail(why);
  }
  return true;
}

}  // namespace trainer
