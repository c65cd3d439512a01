// curves.png: a run's loss and accuracy per epoch, drawn as the Keras multi-GPU article plots them.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/io/progress.h"

namespace trainer {

// Draws "Training Loss and Accuracy (<model_name>)" — x "Epoch #", y "Loss/Accuracy" — with the
// lines train_loss, val_loss, train_acc, val_acc from each row's loss, val_loss, accuracy and
// val_accuracy (whichever exist; NaN and inf values are skipped, a lone point is drawn as a dot,
// so a one-epoch run still gives a plot). `rows` are (epoch, metrics) as metrics.csv holds them
// (0-based epochs; see read_metrics_csv). Writes png_path (800x600, PLplot's pngcairo device)
// through a temporary file and a rename, so a reader never sees half an image.
// Safe to call from any thread (one plot at a time). Prints nothing; on failure returns false and
// sets *error to one line saying why (no PNG device, unwritable path, no data...): a plot is
// never worth failing a training run for.
bool plot_curves(const std::vector<std::pair<int, Metrics>>& rows, const std::string& png_path,
                 const std::string& model_name, std::string* error);

}  // namespace trainer
