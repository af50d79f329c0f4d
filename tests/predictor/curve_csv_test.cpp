// Loss-log parsing: both formats, and every kind of bad input with its line number.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "modelcast/predictor_csv.h"

namespace modelcast::predictor {
namespace {

LossLog parse(const std::string& text, CsvOptions o = {}) {
  std::istringstream in(text);
  return read_loss_log(in, "test.csv", o);
}

// Expects a CsvError at `line` whose message contains `fragment`.
void expect_error(const std::string& text, std::size_t line, const std::string& fragment, CsvOptions o = {}) {
  try {
    parse(text, o);
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const CsvError& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.csv:" + std::to_string(line)), std::string::npos) << e.what();
  }
}

TEST(CurveCsv, ReadsPlainCsvWithHeader) {
  const auto log = parse("step,loss,time_s\n0,10.5,0\n100,4.25,12.5\n200,3.75,25\n");
  ASSERT_EQ(log.points.size(), 3u);
  EXPECT_TRUE(log.has_time);
  EXPECT_EQ(log.points[1].step, 100);
  EXPECT_DOUBLE_EQ(log.points[1].loss, 4.25);
  EXPECT_DOUBLE_EQ(log.points[2].time_s, 25.0);
  EXPECT_FALSE(log.total_steps.has_value());
}

TEST(CurveCsv, ReadsColumnsByNameAndHeaderlessFiles) {
  const auto named = parse("time_s,loss,step\n1.5,4.0,10\n3.0,3.5,20\n");
  EXPECT_EQ(named.points[1].step, 20);
  EXPECT_DOUBLE_EQ(named.points[0].time_s, 1.5);
  const auto bare = parse("10,4.0\n20,3.5\n\n30,3.25\n");
  ASSERT_EQ(bare.points.size(), 3u);
  EXPECT_FALSE(bare.has_time);
  EXPECT_TRUE(std::isnan(bare.points[0].time_s));
}

TEST(CurveCsv, ReadsTheSharedCurvesFormat) {
  const std::string text =
      "run,track,record,step,total_steps,val_loss,train_time_s\n"
      "r1,t1,recA,0,300,10.8,0.0\nr1,t1,recA,150,300,4.0,10.0\n"
      "r2,t1,recB,0,500,10.8,0.0\nr2,t1,recB,250,500,3.9,20.0\nr2,t1,recB,500,500,3.3,41.0\n";
  CsvOptions o;
  o.run = "r2";
  const auto log = parse(text, o);
  ASSERT_EQ(log.points.size(), 3u);
  EXPECT_EQ(log.total_steps, 500);
  EXPECT_EQ(log.record, "recB");
  EXPECT_DOUBLE_EQ(log.points[2].time_s, 41.0);
  std::istringstream in(text);
  const auto all = read_curve_collection(in, "test.csv", "val_loss");
  ASSERT_EQ(all.runs.size(), 2u);
  EXPECT_EQ(all.runs[0].run, "r1");
  EXPECT_EQ(all.runs[1].points.size(), 3u);
}

// The restart may be planned longer (total_steps 200): skipped all the same, not a refused file.
TEST(CurveCsv, CollectionSkipsRunsWithRestarts) {
  std::istringstream in(
      "run,track,record,step,total_steps,val_loss,train_time_s\n"
      "r1,t,a,0,100,5,0\nr1,t,a,100,100,4,1\nr1,t,a,0,200,5,0\nr2,t,a,0,100,5,0\nr2,t,a,100,100,4,1\n");
  const auto all = read_curve_collection(in, "x", "val_loss");
  ASSERT_EQ(all.runs.size(), 1u);
  EXPECT_EQ(all.runs[0].run, "r2");
  EXPECT_EQ(all.skipped_runs, std::vector<std::string>{"r1"});
}

// The collection (the benchmark's and the tuning tool's reader) took what read_loss_log refuses:
// a step beyond 2^53, a negative time, a total_steps of -5 or below the run's steps; it read a
// header after a byte order mark or a blank line as missing 'run'; and a run whose rows were
// not together became two runs of one id, scored apart.
TEST(CurveCsv, TheCollectionReadsAndRefusesAsTheSingleRunReaderDoes) {
  const std::string header = "run,track,record,step,total_steps,val_loss,train_time_s\n";
  const auto collection = [](const std::string& text) {
    std::istringstream in(text);
    return read_curve_collection(in, "test.csv", "val_loss");
  };
  const auto refused = [&](const std::string& text, std::size_t line, const std::string& said) {
    try {
      collection(text);
      ADD_FAILURE() << "read:\n" << text;
    } catch (const CsvError& e) {
      EXPECT_EQ(e.line(), line) << e.what();
      EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
    }
    CsvOptions o;  // the single-run reader says the same
    o.run = "r1";
    expect_error(text, line, said, o);
  };
  refused(header + "r1,t,a,0,100,5,0\nr1,t,a,9000000000000000000,9000000000000000000,4,1\n", 3, "is beyond 2^53");
  refused(header + "r1,t,a,0,100,5,0\nr1,t,a,10,100,4,-5\n", 3, "column 'train_time_s' is negative");
  refused(header + "r1,t,a,0,-5,5,0\n", 2, "total_steps -5 is not in [1, 2^53]");
  refused(header + "r1,t,a,0,7,5,0\nr1,t,a,10,7,4,1\n", 3, "step 10 is past the run's total_steps 7");
  // The last row's value was taken without a word.
  refused(header + "r1,t,a,0,2000,5,0\nr1,t,a,10,3000,4,1\n", 3,
          "total_steps 3000 differs from the run's earlier rows' 2000 (a run has one planned length)");
  refused(header + "r1,t,a,0,100,5,0\nr1,t,a,10,100,4,2,1\n", 3, "expected 7 fields (as the header names), got 8");

  const auto bom = collection("\xEF\xBB\xBF\n" + header + "r1,t,a,0,100,5,0\nr1,t,a,100,100,4,1\n");
  ASSERT_EQ(bom.runs.size(), 1u);
  EXPECT_EQ(bom.runs[0].points.size(), 2u);

  try {
    collection(header + "r1,t,a,0,100,5,0\nr2,t,a,0,100,5,0\nr1,t,a,100,100,4,1\n");
    ADD_FAILURE() << "read a run whose rows are apart";
  } catch (const CsvError& e) {
    EXPECT_EQ(e.line(), 4u) << e.what();
    EXPECT_NE(std::string(e.what()).find("rows of run 'r1' are not together: the run also has rows from line 2"),
              std::string::npos)
        << e.what();
  }
}

// A decimal comma ("3,913" for 3.913) splits a value in two; read by position, the row said
// loss 3 at time 913 and the plan changed with only a later warning about time going back.
TEST(CurveCsv, ARowWithMoreFieldsThanTheHeaderIsRefusedNotReadByPosition) {
  expect_error("step,loss,time_s\n0,5.5,0\n625,3,913,224.107\n", 3, "expected 3 fields (as the header names), got 4");
  expect_error("0,5.5,0\n625,3,913,224.107\n", 2, "expected 3 fields (as the first row has), got 4");
  expect_error("0,5.5\n625,3,913\n", 2, "expected 2 fields (as the first row has), got 3");
  // Fewer fields are refused by the column they lack, as before.
  expect_error("step,loss,time_s\n0,5.5,0\n625,3.9\n", 3, "time_s");
}

TEST(CurveCsv, RepairsATimerRestartWithAWarning) {
  // Real logs exclude warm-up steps from the timer: the clock restarts near 0 at step 40.
  const auto log = parse("step,loss,time_s\n10,9.0,25.0\n20,8.0,26.0\n30,7.0,27.0\n40,6.0,0.5\n50,5.0,1.5\n");
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_NE(log.warnings[0].find("test.csv:5"), std::string::npos) << log.warnings[0];
  EXPECT_DOUBLE_EQ(log.points[3].time_s, 28.0);  // continues at the previous step time (0.1 s/step)
  EXPECT_DOUBLE_EQ(log.points[4].time_s, 29.0);  // later rows shifted by the same amount
}

TEST(CurveCsv, MissingColumns) {
  expect_error("step,time_s\n1,2\n", 1, "missing column 'loss'");
  expect_error("loss,time_s\n1,2\n", 1, "missing column 'step'");
  CsvOptions o;
  o.run = "r1";
  o.loss_column = "train_loss";
  expect_error("run,track,record,step,total_steps,val_loss,train_time_s\nr1,t,a,0,10,5,0\n", 1, "train_loss", o);
  expect_error("step,loss\n10,4.0\n20\n", 3, "missing value");
  expect_error("7\n", 1, "expected step,loss");
}

// A loss column named by the caller is read from a plain log too, or refused where there are no
// names: reading the second column instead would score a loss the caller did not ask for.
TEST(CurveCsv, ANamedLossColumnIsReadFromAPlainLogOrRefusedWithoutAHeader) {
  CsvOptions o;
  o.loss_column = "train_loss";
  const auto log = parse("step,loss,train_loss,time_s\n10,4.0,3.0,1\n20,3.5,2.5,2\n", o);
  ASSERT_EQ(log.points.size(), 2u);
  EXPECT_DOUBLE_EQ(log.points[0].loss, 3.0);
  EXPECT_DOUBLE_EQ(log.points[1].loss, 2.5);
  EXPECT_DOUBLE_EQ(parse("step,loss,train_loss,time_s\n10,4.0,3.0,1\n20,3.5,2.5,2\n").points[0].loss, 4.0);
  expect_error("step,loss,time_s\n10,4.0,1\n20,3.5,2\n", 1, "missing column 'train_loss' (expected step,train_loss[,time_s]; the header is step,loss,time_s): name the loss column with --loss-col", o);
  expect_error("10,4.0,1\n20,3.5,2\n", 1, "a loss column ('train_loss') names a header column; this log has no header", o);
}

// The file system takes a path up to a NUL: the file named before it was read instead.
TEST(CurveCsv, APathWithANulByteIsRefusedAndAMissingFileSaysWhy) {
  try {
    read_loss_log_file(std::string("/tmp/log.csv\0junk", 17), {});
    ADD_FAILURE() << "a path with a NUL byte was taken";
  } catch (const CsvError& e) {
    EXPECT_NE(std::string(e.what()).find("/tmp/log.csv: the path goes on past a NUL byte at byte 12"), std::string::npos)
        << e.what();
  }
  try {
    read_loss_log_file("/nonexistent/log.csv", {});
    ADD_FAILURE() << "a missing file was read";
  } catch (const CsvError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open file: No such file or directory"), std::string::npos) << e.what();
  }
}

// A file written with another delimiter, or with a comment line first, was only "missing column
// 'step'".
TEST(CurveCsv, AHeaderWithoutAStepColumnSaysWhatMayBeWrong) {
  expect_error("step;loss;time_s\n0;5;0\n", 1, "missing column 'step' (expected step,loss[,time_s]); the header is one field holding ';'");
  expect_error("step\tloss\ttime_s\n0\t5\t0\n", 1, "the header is one field holding tabs");
  expect_error("# my run\nstep,loss,time_s\n0,5,0\n", 1, "the first line starts with '#'");
  expect_error("steps,loss,time_s\n0,5,0\n", 1, "missing column 'step' (expected step,loss[,time_s])");
}

// The same curve with every step shifted by 10^10 was forecast differently (and a replay lost
// 3.7 % more), without a word.
TEST(CurveCsv, ALogFarPastStepZeroIsWarnedAbout) {
  const auto shifted = parse("step,loss,time_s\n10000000000,5,0\n10000000100,4,1\n10000001000,3,2\n");
  ASSERT_EQ(shifted.warnings.size(), 1u);
  EXPECT_NE(shifted.warnings[0].find("test.csv: the log starts at step 10000000000, more than 10 times its own span of 1000 steps"),
            std::string::npos)
      << shifted.warnings[0];
  // A later phase that is a small part of the run so far, or a log from step 0, is not.
  EXPECT_TRUE(parse("step,loss,time_s\n5000,5,0\n6000,4,1\n7000,3,2\n").warnings.empty());
  EXPECT_TRUE(parse("step,loss,time_s\n0,5,0\n100,4,1\n").warnings.empty());
}

TEST(CurveCsv, NonNumericAndNonFiniteValues) {
  expect_error("step,loss\n10,4.0\n20,abc\n", 3, "not a number");
  expect_error("step,loss\n10,4.0\n20,nan\n30,3.0\n", 3, "not finite");
  expect_error("step,loss\n10,4.0\n20,inf\n", 3, "not finite");
  expect_error("step,loss\n10,4.0\n2x,3.9\n", 3, "not an integer");
  expect_error("step,loss,time_s\n10,4.0,1\n20,3.9,\n", 3, "not a number");
  // Both said "not a number" / "not an integer" without why.
  expect_error("step,loss\n10,4.0\n20,1e400\n", 3, "column 'loss' is out of a double's range: '1e400'");
  expect_error("step,loss\n10,4.0\n1e16,3.9\n", 3, "is not an integer written exactly (past 9e15");
}

TEST(CurveCsv, StepsMustIncrease) {
  expect_error("step,loss\n10,4.0\n20,3.9\n20,3.8\n", 4, "steps not increasing");
  expect_error("step,loss\n10,4.0\n5,3.9\n", 3, "steps not increasing");
  // A run logged twice under one id is named as that.
  CsvOptions o;
  o.run = "r1";
  expect_error("run,total_steps,step,val_loss,train_time_s\nr1,100,0,5,0\nr1,100,10,4,1\nr1,100,0,5,0\n", 4,
               "steps not increasing: step 0 follows step 10 (run 'r1' starts over here: the file holds it more than once)", o);
}

// Steps are fitted as doubles and spans of them added in plans: past 2^53 they are refused
// by line, not wrapped into a step the user never wrote or a plan that never ends.
TEST(CurveCsv, StepsBeyondTwoToThe53AreRefused) {
  expect_error("step,loss\n0,4.0\n4611686018427387904,3.9\n", 3, "beyond 2^53");
  expect_error("step,loss\n-9007199254740993,4.0\n0,3.9\n", 2, "beyond 2^53");
}

TEST(CurveCsv, AByteOrderMarkIsNotPartOfTheHeader) {
  std::istringstream in("\xEF\xBB\xBFstep,loss,time_s\n10,4.0,1\n20,3.9,2\n");
  auto log = read_loss_log(in, "bom.csv", {});
  ASSERT_EQ(log.points.size(), 2u);
  EXPECT_EQ(log.points[1].step, 20);
}

// Times are seconds of training since it started: the online scheduler refuses a negative one,
// and a plan made from the same log must not take it either.
TEST(CurveCsv, ANegativeTimeIsRefused) {
  expect_error("step,loss,time_s\n10,4.0,-1\n20,3.9,2\n", 2, "column 'time_s' is negative ('-1')");
  CsvOptions o;
  o.run = "r1";
  expect_error("run,track,record,step,total_steps,val_loss,train_time_s\nr1,t,a,0,10,5,0\nr1,t,a,5,10,4,-0.5\n", 3,
               "column 'train_time_s' is negative", o);
}

// Read by getline, a file whose lines end in CR alone is one long line: said so, not "too few
// points".
TEST(CurveCsv, LinesEndingInCarriageReturnAloneAreNamed) {
  expect_error("step,loss\r10,4.0\r20,3.9\r", 1, "lines end in CR alone");
  const auto log = parse("step,loss\r\n10,4.0\r\n20,3.9\r\n");  // CRLF is fine
  EXPECT_EQ(log.points.size(), 2u);
}

// A CR alone after the first line ended a CSV record inside the line, and the rows after it on
// that line were dropped without a word.
TEST(CurveCsv, ACarriageReturnInsideALaterLineIsNamed) {
  expect_error("step,loss,time_s\n10,2,1\r20,1.5,2\r30,1.2,3\n", 2, "a CR inside the line (outside quotes)");
}

// Columns are read by name: a name twice would have one of them read and the other ignored.
TEST(CurveCsv, AColumnNamedTwiceIsRefused) {
  expect_error("step,loss,Loss\n10,4.0,9\n20,3.9,9\n", 1, "column 'Loss' appears twice");
}

TEST(CurveCsv, ACurvesFileWithoutARunIdIsToldToChooseOne) {
  expect_error("run,track,record,step,total_steps,val_loss,train_time_s\nr1,t,a,0,10,5,0\n", 1,
               "a curves file (it has run and total_steps columns): choose one of its runs (modelcast-tune's --run ID, "
               "Python's run=ID)");
}

TEST(CurveCsv, ARunIdForASingleRunLogIsRefused) {
  CsvOptions o;
  o.run = "r7";
  expect_error("step,loss\n10,4.0\n20,3.9\n", 1, "single run", o);
}

TEST(CurveCsv, ALongBadFieldIsQuotedInPart) {
  const std::string field(100000, 'x');
  try {
    std::istringstream in("step,loss\n10,4.0\n20," + field + "\n");
    read_loss_log(in, "long.csv", {});
    FAIL();
  } catch (const CsvError& e) {
    EXPECT_LT(std::string(e.what()).size(), 200u) << "the message holds the whole field";
    EXPECT_NE(std::string(e.what()).find("(100000 bytes)"), std::string::npos) << e.what();
  }
}

TEST(CurveCsv, TooFewPointsAndEmptyInput) {
  expect_error("step,loss\n10,4.0\n", 2, "too few points");
  CsvOptions o;
  o.min_points = 3;
  expect_error("step,loss\n10,4.0\n20,3.0\n", 3, "too few points", o);
  expect_error("", 1, "empty");
  // No minimum: a header alone is an empty log (read past its end before).
  o.min_points = 0;
  std::istringstream header_only("step,loss,time_s\n");
  const auto log = read_loss_log(header_only, "header_only.csv", o);
  EXPECT_TRUE(log.points.empty());
  EXPECT_TRUE(log.warnings.empty());
}

TEST(CurveCsv, CurvesFormatNeedsAKnownRun) {
  const std::string text = "run,track,record,step,total_steps,val_loss,train_time_s\nr1,t,a,0,10,5,0\nr1,t,a,10,10,4,1\n";
  expect_error(text, 1, "--run");
  CsvOptions o;
  o.run = "r9";
  expect_error(text, 3, "run 'r9' not found (the file's runs include 'r1')", o);
}

// The chosen run's rows were read up to the first row of another run, and the rest of the file
// never: a run whose rows came back later was cut short without a word, and rows of two runs
// alternating left one point ("too few points").
TEST(CurveCsv, ARunWhoseRowsAreNotTogetherIsRefusedNotCutShort) {
  const std::string head = "run,track,record,step,total_steps,val_loss,train_time_s\n";
  CsvOptions o;
  o.run = "A";
  expect_error(head + "A,t,a,0,40,5,0\nA,t,a,10,40,4,1\nB,t,a,0,40,5,0\nA,t,a,20,40,3,2\n", 5,
               "rows of run 'A' are not together: the run also has rows from line 2, with other runs between (from line 4)", o);
  expect_error(head + "A,t,a,0,40,5,0\nB,t,a,0,40,5,0\nA,t,a,10,40,4,1\n", 4, "rows of run 'A' are not together", o);
  // Together, with other runs before and after, the run is read whole.
  const auto log = parse(head + "B,t,a,0,40,5,0\nA,t,a,0,40,5,0\nA,t,a,10,40,4,1\nA,t,a,20,40,3,2\nB,t,a,10,40,4,1\n", o);
  ASSERT_EQ(log.points.size(), 3u);
  EXPECT_EQ(log.points.back().step, 20);
}

TEST(CurveCsv, AcceptsQuotedFieldsPerRfc4180) {
  // Spreadsheets and pandas' QUOTE_ALL quote every field, headers included.
  const auto log = parse("\"step\",\"loss\",\"time_s\"\r\n\"0\",\"10.5\",\"0\"\r\n100, \"4.25\" ,12.5\r\n");
  ASSERT_EQ(log.points.size(), 2u);
  EXPECT_TRUE(log.has_time);
  EXPECT_EQ(log.points[1].step, 100);
  EXPECT_DOUBLE_EQ(log.points[1].loss, 4.25);
  EXPECT_DOUBLE_EQ(log.points[1].time_s, 12.5);
  // A quoted header with a comma and a doubled quote inside stays one column, not a "step".
  const auto named = parse("\"note, \"\"x\"\"\",step,loss,time_s\na,0,5,0\nb,10,4,1\n");
  EXPECT_EQ(named.points[1].step, 10);
  EXPECT_DOUBLE_EQ(named.points[1].loss, 4.0);
}

TEST(CurveCsv, RejectsMalformedQuotingWithItsLine) {
  // Read a line at a time, a quoted field spanning lines was "error parsing data".
  expect_error("step,loss,time_s\n0,5,0\n10,\"4,1\n", 3, "a quoted field is not closed on its line");
  expect_error("step,loss,time_s\n0,5,0\n10,\"4\n\",1\n", 3, "a quoted field is not closed on its line (a record is one line)");
  expect_error("step,loss,time_s\n0,5\"x\",0\n", 2, "malformed CSV record");
}

// A gzip file was reported as a malformed record followed by its compressed bytes.
TEST(CurveCsv, AGzipFileIsNamedAsSuch) {
  expect_error(std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xad\x92\"\x01\n", 15), 1,
               "looks gzip-compressed; decompress it first");
}

// UTF-16 (PowerShell's Out-File, Excel's "Unicode text") was called a binary file, or a log
// missing its step column.
TEST(CurveCsv, AUtf16FileIsNamedAsSuch) {
  const std::string text = "step,loss,time_s\r\n0,5,0\r\n10,4,1\r\n";
  for (bool with_bom : {true, false}) {
    for (bool big_endian : {false, true}) {
      std::string wide;
      if (with_bom) wide = big_endian ? std::string("\xFE\xFF", 2) : std::string("\xFF\xFE", 2);
      for (char c : text) {
        if (big_endian) wide += '\0';
        wide += c;
        if (!big_endian) wide += '\0';
      }
      expect_error(wide, 1, "is UTF-16 text; convert it to UTF-8 first");
    }
  }
  // A binary file starting with a small little-endian number is not taken for text.
  try {
    parse(std::string("\x10\0\0\0\0\0\0\0{\r\x01\n", 12));
    ADD_FAILURE() << "a binary file read";
  } catch (const CsvError& e) {
    EXPECT_EQ(std::string(e.what()).find("UTF-16"), std::string::npos) << e.what();
  }
}

// An endless stream of bytes without a line end, as /dev/zero is: it was read into memory until
// the process ran out (0.5 GB/s). Now the line is refused once it passes the bound.
TEST(CurveCsv, ALineWithoutEndIsRefusedOnceItPassesTheBound) {
  // `head`, then '7' for ever.
  struct Endless : std::streambuf {
    std::string head;
    char block[4096];
    explicit Endless(std::string h) : head(std::move(h)) {
      std::fill(std::begin(block), std::end(block), '7');
      if (!head.empty()) setg(head.data(), head.data(), head.data() + head.size());
    }
    int_type underflow() override {
      setg(block, block, block + sizeof block);
      return traits_type::to_int_type(block[0]);
    }
  };
  for (const std::string head : {"", "step,loss,time_s\n10,1.0,1\n"}) {
    Endless endless(head);
    std::istream in(&endless);
    try {
      read_loss_log(in, "endless", {});
      ADD_FAILURE() << "an endless line was read";
    } catch (const CsvError& e) {
      EXPECT_EQ(e.line(), head.empty() ? 1u : 3u) << e.what();
      EXPECT_NE(std::string(e.what()).find("the line is longer than 64 MiB"), std::string::npos) << e.what();
    }
  }
}

// An executable given as the log was said to have "lines end in CR alone (classic Mac OS)".
TEST(CurveCsv, ABinaryFileIsNamedAsSuch) {
  expect_error(std::string("\x7f" "ELF\x02\x01\x01\0\0\0\r\0\x03\0>\0\x01\0\0\0\n", 21), 1,
               "holds NUL bytes and CRs inside a line: not a text CSV file");
  expect_error("step,loss\r10,4\r20,3\r", 1, "lines end in CR alone");  // a Mac text file is still one
}

// A cell or header name was quoted raw: a NUL byte ended the message there (what() is a C
// string), and a newline or escape sequence reached the terminal.
TEST(CurveCsv, ACellOrNameWithControlBytesIsQuotedEscapedAndWhole) {
  expect_error(std::string("step,loss,time_s\n10,4.0,1\n20,ab\0cd,2\n", 37), 3,
               "column 'loss' is not a number: 'ab\\x00cd'");
  expect_error("step,loss,time_s\n10,\"4\x1b[2J\",1\n", 2, "column 'loss' is not a number: '4\\x1b[2J'");
  expect_error(std::string("step,loss,l\0x,l\0x\n10,4.0,1,1\n", 29), 1, "column 'l\\x00x' appears twice");
}

// Binary garbage in a malformed record was echoed whole, control bytes and all.
TEST(CurveCsv, AMalformedRecordIsShownInPartWithControlBytesEscaped) {
  std::string garbage = "step,loss\n0,5\n10,\"4";
  for (int i = 0; i < 5000; ++i) garbage += static_cast<char>(i % 32 == 10 ? 1 : i % 32);
  garbage += "\n";
  try {
    parse(garbage);
    ADD_FAILURE() << "accepted";
  } catch (const CsvError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a quoted field is not closed on its line"), std::string::npos) << what;
    EXPECT_LT(what.size(), 200u) << what;
    EXPECT_NE(what.find("\\x01"), std::string::npos) << what;
    EXPECT_NE(what.find("(5005 bytes)"), std::string::npos) << what;
    for (char c : what) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "raw control byte in: " << what;
  }
}

// Header names are matched in any case, as the learning-rate schedule's reader does.
TEST(CurveCsv, HeaderNamesInAnyCase) {
  const auto log = parse("Step,Loss,Time_s\n0,10.5,0\n100,4.25,12.5\n");
  ASSERT_EQ(log.points.size(), 2u);
  EXPECT_TRUE(log.has_time);
  EXPECT_DOUBLE_EQ(log.points[1].time_s, 12.5);
}

}  // namespace
}  // namespace modelcast::predictor
