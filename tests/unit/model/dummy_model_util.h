// A model with seeded random weights from a config.json written into a scratch directory (no
// tokenizer): what the forward-pass tests build their small models from.
#pragma once

#include <fstream>
#include <string>

#include "ember/model/model_loader.h"
#include "test_util.h"

namespace ember::test {

inline LoadedModel load_dummy_model(const std::string& name, const std::string& config_json,
                                    DType dtype) {
  auto dir = scratch_dir(name);
  std::ofstream(dir / "config.json") << config_json;
  LoadOptions o;
  o.path = dir.string();
  o.dummy = true;
  o.dtype = dtype;
  o.load_tokenizer = false;
  return load_model(o);
}

}  // namespace ember::test
