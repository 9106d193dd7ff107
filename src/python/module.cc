// strata._strata: the native half of the Python package (python/strata).
// It binds the run API the CLI uses (launch/train.h, experiment/,
// sharding/plan_files.h) and nothing else: the package's Python half turns
// nn.Modules into TorchScript, reads the run directory back and calls the
// callbacks. Long calls run as a Job on a thread of their own; waiting for
// one releases the GIL. Results cross as JSON text. No LibTorch header is
// included here (the extension links it through the launcher).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/log.h"
#include "data/load.h"
#include "experiment/experiment.h"
#include "experiment/results.h"
#include "launch/scale.h"
#include "launch/train.h"
#include "python/job.h"
#include "run/run_lock.h"
#include "sharding/plan_files.h"

namespace py = pybind11;

namespace strata {
namespace {

// A Status that crossed into Python: the translator below raises the
// matching strata.errors class with its message.
struct StatusError {
  Status status;
};

[[noreturn]] void Throw(const Status& st) { throw StatusError{st}; }

template <typename T>
T OrThrow(Result<T> r) {
  if (!r.ok()) Throw(r.status());
  return std::move(*r);
}

void TranslateStatusErrors() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object errors = py::module_::import("strata.errors");
      py::object cls = errors.attr("error_class")(CodeName(e.status.code()));
      PyErr_SetObject(cls.ptr(), py::str(e.status.message()).release().ptr());
    }
  });
}

// A Python value as a config value of the key's type, so that a bad type
// is refused with the key named (Config::Set).
// numpy scalars are taken through __index__ / __float__ / their bool.
ConfigValue ToConfigValue(const std::string& key, const py::handle& v) {
  const std::string type =
      py::str(py::type::of(v).attr("__name__")).cast<std::string>();
  try {
    if (py::isinstance<py::bool_>(v) || type == "bool_") return v.cast<bool>();
    if (py::isinstance<py::str>(v)) return v.cast<std::string>();
    if (py::hasattr(v, "__index__"))
      return py::int_(py::reinterpret_borrow<py::object>(v)).cast<int64_t>();
    if (py::hasattr(v, "__float__"))
      return py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>();
  } catch (const py::cast_error&) {
    Throw(Status::InvalidArgument("{}: {} does not fit a 64-bit integer", key,
                                  py::repr(v).cast<std::string>()));
  }
  Throw(Status::InvalidArgument(
      "{}: a config value must be a bool, int, float or str, not {}", key,
      type));
}

py::object FromConfigValue(const ConfigValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

const ConfigKey& KnownKey(const std::string& key) {
  const ConfigKey* k = Config::FindKey(key);
  if (k == nullptr) {
    // Set() words the unknown-key error (with the nearest names).
    Config probe;
    Throw(probe.Set(key, ConfigValue(int64_t{0})));
  }
  return *k;
}

py::object GetValue(const Config& c, const std::string& key) {
  switch (KnownKey(key).type) {
    case ConfigKey::Type::kInt:
      return py::cast(c.GetInt(key));
    case ConfigKey::Type::kFloat:
      return py::cast(c.GetFloat(key));
    case ConfigKey::Type::kBool:
      return py::cast(c.GetBool(key));
    case ConfigKey::Type::kString:
      break;
  }
  return py::cast(c.GetString(key));
}

py::list SchemaList() {
  static const char* kTypes[] = {"int", "float", "bool", "str"};
  py::list out;
  for (const ConfigKey& k : Config::Schema()) {
    out.append(py::make_tuple(k.name, kTypes[static_cast<int>(k.type)],
                              FromConfigValue(k.default_value), k.help,
                              k.choices));
  }
  return out;
}

void BindConfig(py::module_& m) {
  py::class_<Config>(m, "Config")
      .def(py::init<>())
      .def("load_toml",
           [](Config& c, const std::string& path) {
             c = OrThrow(Config::FromTomlFile(path));
           })
      .def("load_toml_string",
           [](Config& c, const std::string& text, const std::string& origin) {
             c = OrThrow(Config::FromTomlString(text, origin));
           })
      .def("apply",
           [](Config& c, const std::string& assignment) {
             Status st = c.ApplyOverride(assignment);
             if (!st.ok()) Throw(st);
           })
      .def("set",
           [](Config& c, const std::string& key, const py::handle& value) {
             Status st = c.Set(key, ToConfigValue(key, value));
             if (!st.ok()) Throw(st);
           })
      .def("get", &GetValue)
      .def("to_toml", &Config::ToToml)
      .def("copy", [](const Config& c) { return Config(c); });
  m.def("schema", &SchemaList,
        "every config key: (name, type, default, help, choices)");
}

// Destroys a Job with the GIL released: ~Job waits for a stopped run to
// end, and other Python threads go on meanwhile.
struct JobDeleter {
  void operator()(Job* job) const {
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      delete job;
    } else {
      delete job;
    }
  }
};
using JobPtr = std::unique_ptr<Job, JobDeleter>;

void BindJob(py::module_& m) {
  py::class_<Job, JobPtr>(m, "Job")
      .def(
          "wait",
          [](Job& job, double timeout_s) {
            bool done;
            {
              py::gil_scoped_release release;
              done = job.Wait(timeout_s);
            }
            // Ctrl-C while waiting: KeyboardInterrupt in the caller.
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
            return done;
          },
          py::arg("timeout_s"))
      .def("stop", &Job::Stop)
      .def_property_readonly("stop_requested", &Job::stop_requested)
      .def("result", [](Job& job) { return OrThrow(job.Take()); });
}

// strata train: the config resolved and the run directory made here (their
// errors raise at once), the training on the job's thread.
py::tuple StartTrain(const std::string& config_path, const Config& base,
                     const std::vector<std::string>& overrides, bool processes,
                     const std::string& resume, const std::string& exe) {
  TrainRequest request;
  request.config_path = config_path;
  request.base = base;
  request.overrides = overrides;
  request.processes = processes;
  request.resume = resume;
  request.exe = exe;
  Config config = OrThrow(ResolveTrainConfig(request));
  Status launch = CheckLaunch(request, config);
  if (!launch.ok()) Throw(launch);
  RunDirectory run_dir = OrThrow(TrainRunDirectory(request, config));
  // Held by the job until it ends, as `strata train` holds it.
  auto lock = std::make_shared<std::optional<RunLock>>(
      OrThrow(RunLock::Hold(run_dir.path())));
  SetLogLevel(LogLevelNamed(config.GetString("run.log_level")));
  JobPtr job(new Job([request, config, run_dir, lock](
                         const std::atomic<bool>* stop) -> Result<std::string> {
    ASSIGN_OR_RETURN(RunSummary s, Train(request, config, run_dir, stop));
    return s.ToJson().dump();
  }));
  return py::make_tuple(std::move(job), run_dir.path(), config);
}

JobPtr StartExperiment(ExperimentOptions options) {
  return JobPtr(new Job(
      [options](const std::atomic<bool>* stop) mutable -> Result<std::string> {
        options.stop = stop;
        ASSIGN_OR_RETURN(int code, RunExperiment(options));
        return nlohmann::json{{"exit_code", code}}.dump();
      }));
}

JobPtr StartShard(const Config& config, int workers,
                  const std::string& plan_path,
                  const std::string& report_path) {
  return JobPtr(
      new Job([=](const std::atomic<bool>* stop) -> Result<std::string> {
        ASSIGN_OR_RETURN(
            nlohmann::json report,
            WriteShardPlanFiles(config, workers, plan_path, report_path, stop));
        return report.dump();
      }));
}

// One array of a loaded dataset, lent to Python without a copy through the
// buffer protocol (torch.frombuffer keeps this object, and with it the
// dataset, alive).
struct DatasetArray {
  std::shared_ptr<DatasetSplits> owner;
  void* data = nullptr;
  ssize_t size = 0;
  bool is_float = true;
};

DatasetArray ArrayOf(const std::shared_ptr<DatasetSplits>& d,
                     std::vector<float>& v) {
  return {d, v.data(), static_cast<ssize_t>(v.size()), true};
}

DatasetArray ArrayOf(const std::shared_ptr<DatasetSplits>& d,
                     std::vector<int64_t>& v) {
  return {d, v.data(), static_cast<ssize_t>(v.size()), false};
}

py::dict SplitDict(const std::shared_ptr<DatasetSplits>& d, Dataset& s) {
  py::dict out;
  out["name"] = s.name;
  out["shape"] = py::make_tuple(s.size(), s.channels, s.height, s.width);
  out["classes"] = s.num_classes;
  out["features"] = ArrayOf(d, s.features);
  out["labels"] = ArrayOf(d, s.labels);
  return out;
}

// The dataset the config names, as strata trains on it (validation split
// held out, standardised): {"train": split, "val": split}.
py::dict LoadDataset(const Config& config) {
  Result<DatasetSplits> loaded = Status::Internal("not loaded");
  {
    py::gil_scoped_release release;
    loaded = LoadDatasetFromConfig(config);
  }
  auto d = std::make_shared<DatasetSplits>(OrThrow(std::move(loaded)));
  py::dict out;
  out["train"] = SplitDict(d, d->train);
  out["val"] = SplitDict(d, d->val);
  return out;
}

void BindDataset(py::module_& m) {
  py::class_<DatasetArray>(m, "DatasetArray", py::buffer_protocol())
      .def_buffer([](DatasetArray& a) {
        const ssize_t item = a.is_float ? sizeof(float) : sizeof(int64_t);
        return py::buffer_info(a.data, item,
                               a.is_float
                                   ? py::format_descriptor<float>::format()
                                   : py::format_descriptor<int64_t>::format(),
                               1, {a.size}, {item});
      });
  m.def("load_dataset", &LoadDataset, py::arg("config"));
}

std::string LoadResultsJson(const std::string& path) {
  Result<std::string> text = Status::Internal("not read");
  {
    py::gil_scoped_release release;  // reads every run's files
    Result<ExperimentData> data = LoadResults(path);
    text = data.ok() ? Result<std::string>(Summarize(*data).dump())
                     : Result<std::string>(data.status());
  }
  return OrThrow(std::move(text));
}

void BindStarts(py::module_& m) {
  m.def("start_train", &StartTrain, py::arg("config_path"), py::arg("base"),
        py::arg("overrides"), py::arg("processes"), py::arg("resume"),
        py::arg("exe"),
        "resolves the config, makes the run directory and starts training; "
        "returns (job, run_dir, config)");
  m.def(
      "start_experiment",
      [](const std::string& spec, const std::string& output, int parallel,
         double run_timeout_s, bool dry_run, const std::string& exe) {
        ExperimentOptions o;
        o.spec_path = spec;
        o.output = output;
        o.parallel = parallel;
        o.run_timeout_s = run_timeout_s;
        o.dry_run = dry_run;
        o.exe = exe;
        return StartExperiment(o);
      },
      py::arg("spec"), py::arg("output"), py::arg("parallel"),
      py::arg("run_timeout_s"), py::arg("dry_run"), py::arg("exe"));
  m.def("start_shard", &StartShard, py::arg("config"), py::arg("workers"),
        py::arg("plan_path"), py::arg("report_path"));
  m.def("load_results", &LoadResultsJson, py::arg("path"),
        "an experiment or run directory summarised (strata report's JSON)");
  m.def(
      "scale",
      [](const std::string& run_dir, int workers, double timeout_s,
         const std::vector<int>& drain, int data_servers) {
        Result<ScaleOutcome> out = Status::Internal("not run");
        {
          py::gil_scoped_release release;  // waits for the run
          out = ScaleRun(
              run_dir, workers,
              std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)),
              nullptr, drain, data_servers);
        }
        const ScaleOutcome o = OrThrow(std::move(out));
        return py::make_tuple(o.from, o.to, o.step, o.since_request_s);
      },
      py::arg("run_dir"), py::arg("workers"), py::arg("timeout_s"),
      py::arg("drain"), py::arg("data_servers") = 0,
      "strata scale: (from, to, step, seconds from the request to training "
      "again); `drain`: workers to leave (workers 0: the run's count less "
      "them); `data_servers`: a new number of data servers (0: the same)");
}

}  // namespace
}  // namespace strata

PYBIND11_MODULE(_strata, m) {
  m.doc() = "strata's native module; use the strata package instead";
  strata::TranslateStatusErrors();
  strata::BindConfig(m);
  strata::BindJob(m);
  strata::BindStarts(m);
  strata::BindDataset(m);
}
